#!/usr/bin/env bash
# End-to-end tests with real clients: starts `hibana serve` (embedded model) on a free port,
# drives it with the official openai and @anthropic-ai/sdk packages, then runs Claude Code and
# Codex CLI headless through `hibana launch`, and checks the server answered every request
# without an error status.
#   tests/e2e/run.sh path/to/hibana        (exit 77 = skipped: no node or no node_modules)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="$(realpath "$1")"
if ! command -v node >/dev/null || [ ! -d "$here/node_modules/openai" ]; then
  echo "e2e: skipped (needs node and 'npm ci' in tests/e2e; scripts/test does that)"
  exit 77
fi
work="$(mktemp -d)"
port="$(node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')"
# The tiny model rambles until its limit; --max-output-tokens keeps the agents' turns short on
# a 2-core CI machine.
"$bin" serve --host 127.0.0.1 --port "$port" --max-output-tokens 256 --log-level info >"$work/server.log" 2>&1 &
server=$!
cleanup() { kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
for _ in $(seq 1 600); do
  if curl -sf "http://127.0.0.1:$port/health" >/dev/null; then break; fi
  if ! kill -0 "$server" 2>/dev/null; then cat "$work/server.log"; echo "e2e: server died"; exit 1; fi
  sleep 0.1
done
export HIBANA_BASE_URL="http://127.0.0.1:$port"

echo "== SDK tests"
(cd "$here" && node --test --test-concurrency=1 openai.test.mjs anthropic.test.mjs)

export PATH="$here/node_modules/.bin:$PATH"
mark=$(wc -l <"$work/server.log")
echo "== Claude Code (headless, offline)"
mkdir -p "$work/home-claude"
HOME="$work/home-claude" timeout 300 "$bin" launch claude --port "$port" --no-start -- \
  -p "say hello" --output-format json >"$work/claude.json" || echo "claude exited with $?"
# Claude Code reports a turn that keeps hitting the output limit as an error of its own
# ("max_output_tokens"); that is the tiny model's verbosity, not the protocol: accept it.
node -e 'const r=JSON.parse(require("fs").readFileSync(process.argv[1],"utf8")); if (r.is_error && r.api_error !== "max_output_tokens") { console.error(r); process.exit(1); } console.log("claude:", r.num_turns, "turns,", r.usage.output_tokens, "output tokens:", JSON.stringify(r.result).slice(0, 100));' "$work/claude.json"

echo "== Codex CLI (headless, offline)"
mkdir -p "$work/home-codex" "$work/codex-cwd"
(cd "$work/codex-cwd" && HOME="$work/home-codex" timeout 300 "$bin" launch codex --port "$port" --no-start -- \
  exec --skip-git-repo-check "say hello" >"$work/codex.out" 2>&1) || {
  # Like Claude Code, Codex calls a reply cut at the output limit an error; anything else fails.
  if grep '^ERROR' "$work/codex.out" | grep -qv 'reason: max_output_tokens'; then
    cat "$work/codex.out"; exit 1
  fi
  grep -q 'reason: max_output_tokens' "$work/codex.out" || { cat "$work/codex.out"; exit 1; }
  echo "codex: the reply was cut at --max-output-tokens (accepted)"
}
tail -3 "$work/codex.out"

echo "== server log after the agents"
tail -n +"$((mark + 1))" "$work/server.log" | grep -E '\] (GET|POST) /' | cut -c1-160 || true
if tail -n +"$((mark + 1))" "$work/server.log" | grep -E '\] (GET|POST) [^ ]* [45][0-9][0-9] '  ; then
  echo "e2e: the agents got error responses (above)"
  exit 1
fi
if ! tail -n +"$((mark + 1))" "$work/server.log" | grep -qE '\] POST /v1/messages[^ ]* 200 '; then
  echo "e2e: Claude Code made no successful /v1/messages request"; exit 1
fi
if ! tail -n +"$((mark + 1))" "$work/server.log" | grep -qE '\] POST /v1/responses[^ ]* 200 '; then
  echo "e2e: Codex made no successful /v1/responses request"; exit 1
fi
echo "e2e: all passed"
