#!/usr/bin/env python3
"""Scores a trained checkpoint with transformers the way `hibana perplexity` does: the text is
tokenized with the checkpoint's tokenizer.json, cut into non-overlapping 1024-token windows, each
scored from an empty state (its first token is context only). Also reports greedy next-token
accuracy and the MTP head's accuracy on the token after next. Runs in fp32 (no TF32).

    python3 tools/train/evaluate.py --model models/hibana-tiny --text models/hibana-tiny/heldout.txt
"""
import argparse
import json
import os
import sys

import torch
import transformers
from safetensors.torch import load_file
from tokenizers import Tokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train import Mtp, evaluate  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--window", type=int, default=1024)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tok = Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
    ids = torch.tensor(tok.encode(open(args.text, encoding="utf-8").read()).ids, dtype=torch.int32)
    model = transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).to(device)
    model.eval()
    mtp = Mtp(model).to(device).float()
    state = {k[len("mtp."):]: v.float() for k, v in
             load_file(os.path.join(args.model, "model-mtp.safetensors")).items()}
    mtp.load_state_dict(state)
    with torch.no_grad():
        result = evaluate(model, mtp, ids, device, window=args.window)
    result.update({"text": args.text, "text_tokens": len(ids), "transformers": transformers.__version__})
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
