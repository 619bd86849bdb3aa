#!/usr/bin/env node
// The qwen3_golden.jsonl of make_tokenizer_golden.py, made with the npm "tokenizers" package
// (the Node binding of the same Rust library as Python's tokenizers) for machines without the
// Python package. It does not produce "ids_vocab_merges" (that needs transformers).
//
//   python3 tools/tokenizer/make_tokenizer_golden.py ASSETS --docs-json /tmp/docs.json
//   npm install --prefix /tmp/hf tokenizers@0.23.2
//   NODE_PATH=/tmp/hf/node_modules node tools/tokenizer/golden_with_node.js ASSETS \
//       /tmp/docs.json tests/fixtures/tokenizer
'use strict';
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require('tokenizers');

async function main() {
  const [assets, docsPath, outDir] = process.argv.slice(2);
  if (!assets || !docsPath || !outDir) {
    console.error('usage: golden_with_node.js ASSETS DOCS_JSON OUT_DIR');
    process.exit(2);
  }
  const tok = Tokenizer.fromFile(path.join(assets, 'qwen3-tokenizer', 'tokenizer.json'));
  const docs = JSON.parse(fs.readFileSync(docsPath, 'utf8'));
  const lines = [];
  for (const text of docs) {
    const ids = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
    lines.push(JSON.stringify({ text, ids }));
  }
  fs.mkdirSync(outDir, { recursive: true });
  const out = path.join(outDir, 'qwen3_golden.jsonl');
  fs.writeFileSync(out, lines.join('\n') + '\n');
  const version = require('tokenizers/package.json').version;
  const meta = {
    tokenizers: `${version} (npm binding)`,
    documents: docs.length,
    ids: 'tokenizers Tokenizer.fromFile(qwen3-tokenizer/tokenizer.json).encode(text, null, {addSpecialTokens: false})',
  };
  fs.writeFileSync(path.join(outDir, 'qwen3_golden.meta.json'), JSON.stringify(meta, null, 2) + '\n');
  console.log(`wrote ${docs.length} documents to ${out} (${(fs.statSync(out).size / 1e6).toFixed(2)} MB)`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
