#!/usr/bin/env python3
"""Trains hibana-tiny, the embedded default model: a small Qwen3-Next (Gated DeltaNet + gated
attention + sparse MoE with a shared expert) with one MTP layer trained jointly on the token
after next, built from transformers' own Qwen3Next modules so the checkpoint is a standard HF one.

Runs on the GPU machine in one call (see models/hibana-tiny/README.md for the exact command):
    python3 tools/train/train.py --corpus CORPUS_DIR --out OUT_DIR [--minutes 5] [--smoke]

Steps: train a byte-level BPE tokenizer (tokenizers) with the ChatML specials; tokenize the
corpus (20% of documents wrapped as chat exchanges, so the model learns the template and to end
its turn with <|im_end|>); train for a fixed wall-clock budget with a cosine schedule; save
bf16 shards (<= 14 MB each) + mtp.* tensors + tokenizer files; evaluate on the held-out text.
"""
import argparse
import copy
import json
import math
import os
import random
import time

import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import save_file
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>",
            "</tool_call>", "<tool_response>", "</tool_response>"]
QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")
VOCAB = 8192
SEQ = 1024
MTP_WEIGHT = 0.3

# Our own ChatML template: system / user / assistant turns, optional reasoning in <think>,
# Qwen-style JSON tool calls and <tool_response> results.
CHAT_TEMPLATE = r"""{%- if tools %}<|im_start|>system
{% if messages and messages[0].role == 'system' %}{{ messages[0].content }}

{% endif %}You can call these tools. For each call, write <tool_call>{"name": ..., "arguments": {...}}</tool_call>.
<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools><|im_end|>
{% elif messages and messages[0].role == 'system' %}<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == 'system' %}{% if not loop.first %}<|im_start|>system
{{ message.content }}<|im_end|>
{% endif %}
{%- elif message.role == 'tool' %}<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% elif message.role == 'assistant' %}<|im_start|>assistant
{% if message.reasoning_content %}<think>
{{ message.reasoning_content }}
</think>

{% endif %}{{ message.content if message.content else '' }}
{%- if message.tool_calls %}{% for call in message.tool_calls %}{{ '\n' }}<tool_call>
{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson if call.function.arguments is mapping else call.function.arguments }}}
</tool_call>{% endfor %}{% endif %}<|im_end|>
{% else %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% if enable_thinking is defined and not enable_thinking %}<think>

</think>

{% endif %}{% endif %}"""


def train_tokenizer(docs, out_dir):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIALS, min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator((d["text"] for d in docs), trainer=trainer)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    added = {str(tok.token_to_id(t)): {"content": t, "lstrip": False, "rstrip": False,
                                       "normalized": False, "single_word": False,
                                       "special": t.startswith("<|")} for t in SPECIALS}
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 65536,
           "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None,
           "unk_token": None, "added_tokens_decoder": added, "chat_template": CHAT_TEMPLATE,
           "clean_up_tokenization_spaces": False}
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)
    return tok


def as_chat(doc, rng):
    """Wraps a document as a short exchange in the chat template."""
    path = doc["path"]
    if path.endswith(".py"):
        name = path.split("/python3.11/")[-1]
        ask = rng.choice([f"Write the Python module {name}.", f"Show me {name} from the standard library.",
                          f"Please write {name} in Python."])
    else:
        cmd = os.path.basename(path).split(".")[0]
        ask = rng.choice([f"Explain the {cmd} command.", f"How do I use {cmd}?",
                          f"Show me the manual of {cmd}."])
    body = doc["text"][: rng.randint(800, 4000)]
    system = "<|im_start|>system\nYou are a helpful coding assistant.<|im_end|>\n" if rng.random() < 0.5 else ""
    return f"{system}<|im_start|>user\n{ask}<|im_end|>\n<|im_start|>assistant\n{body.rstrip()}<|im_end|>\n"


def build_stream(tok, docs, seed):
    rng = random.Random(seed)
    texts = [as_chat(d, rng) if rng.random() < 0.2 else d["text"] for d in docs]
    eot = tok.token_to_id("<|endoftext|>")
    ids = []
    for enc in tok.encode_batch(texts):
        ids.extend(enc.ids)
        ids.append(eot)
    return torch.tensor(ids, dtype=torch.int32)


def make_config(tok):
    return transformers.Qwen3NextConfig(
        vocab_size=VOCAB, hidden_size=384, intermediate_size=1024, num_hidden_layers=8,
        num_attention_heads=6, num_key_value_heads=2, head_dim=64, rms_norm_eps=1e-6,
        max_position_embeddings=65536, rope_theta=10000000.0, partial_rotary_factor=0.25,
        tie_word_embeddings=True, full_attention_interval=4, linear_num_key_heads=4,
        linear_num_value_heads=8, linear_key_head_dim=64, linear_value_head_dim=48,
        linear_conv_kernel_dim=4, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=128,
        shared_expert_intermediate_size=256, norm_topk_prob=True, decoder_sparse_step=1,
        mlp_only_layers=[], router_aux_loss_coef=0.01,
        bos_token_id=None, eos_token_id=tok.token_to_id("<|im_end|>"),
        pad_token_id=tok.token_to_id("<|endoftext|>"))


class Mtp(torch.nn.Module):
    """The Qwen3-Next MTP head: fc over [norm(embed(x_{t+1})) ; norm(h_t)], one full-attention
    decoder layer (a fresh copy of the model's own), a final norm; embedding and lm_head shared."""

    def __init__(self, model):
        super().__init__()
        cfg = model.config
        norm_cls = type(model.model.norm)
        idx = max(i for i, t in enumerate(cfg.layer_types) if t == "full_attention")
        self.layers = torch.nn.ModuleList([copy.deepcopy(model.model.layers[idx])])
        for p in self.layers.parameters():
            if p.dim() >= 2:
                torch.nn.init.normal_(p, std=0.02)
        self.fc = torch.nn.Linear(2 * cfg.hidden_size, cfg.hidden_size, bias=False)
        torch.nn.init.normal_(self.fc.weight, std=0.02)
        self.pre_fc_norm_embedding = norm_cls(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.pre_fc_norm_hidden = norm_cls(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.norm = norm_cls(cfg.hidden_size, eps=cfg.rms_norm_eps)

    def forward(self, model, next_ids, hidden):
        e = self.pre_fc_norm_embedding(model.model.embed_tokens(next_ids))
        x = self.fc(torch.cat([e, self.pre_fc_norm_hidden(hidden)], dim=-1))
        pos = torch.arange(x.shape[1], device=x.device)[None].expand(x.shape[0], -1)
        cos_sin = model.model.rotary_emb(x, pos)
        out = self.layers[0](hidden_states=x, position_embeddings=cos_sin, attention_mask=None,
                             position_ids=pos)
        if isinstance(out, tuple):
            out = out[0]
        return self.norm(out)


def losses(model, mtp, x, aux_fn):
    """Main next-token loss, MTP token-after-next loss, router balance loss."""
    out = model.model(input_ids=x, output_router_logits=aux_fn is not None)
    h = out.last_hidden_state
    logits = model.lm_head(h[:, :-1])
    main = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1).long())
    # MTP row t pairs h_t with x_{t+1} and predicts x_{t+2}.
    mh = mtp(model, x[:, 1:-1], h[:, :-2])
    ml = model.lm_head(mh)
    mtp_loss = F.cross_entropy(ml.float().reshape(-1, ml.shape[-1]), x[:, 2:].reshape(-1).long())
    aux = torch.zeros((), device=x.device)
    if aux_fn is not None and getattr(out, "router_logits", None):
        aux = aux_fn(out.router_logits, model.config.num_experts, model.config.num_experts_per_tok)
    return main, mtp_loss, aux


def evaluate(model, mtp, ids, device, window=SEQ):
    """Perplexity over non-overlapping windows (the first token of each window is context only),
    next-token top-1 accuracy, and MTP top-1 accuracy for the token after next."""
    model.eval()
    nll, count, correct, mtp_correct, mtp_count = 0.0, 0, 0, 0, 0
    with torch.no_grad():
        for s in range(0, len(ids) - 1, window):
            x = ids[s:s + window].long()[None].to(device)
            if x.shape[1] < 2:
                break
            out = model.model(input_ids=x)
            h = out.last_hidden_state
            logits = model.lm_head(h).float()[0, :-1]
            tgt = x[0, 1:]
            nll += F.cross_entropy(logits, tgt, reduction="sum").item()
            count += tgt.numel()
            correct += (logits.argmax(-1) == tgt).sum().item()
            if x.shape[1] >= 3 and mtp is not None:
                ml = model.lm_head(mtp(model, x[:, 1:-1], h[:, :-2])).float()[0]
                mtp_correct += (ml.argmax(-1) == x[0, 2:]).sum().item()
                mtp_count += x.shape[1] - 2
    model.train()
    return {"perplexity": math.exp(nll / count), "tokens": count, "next_token_accuracy": correct / count,
            "mtp_accuracy": mtp_correct / max(1, mtp_count)}


def save_checkpoint(model, mtp, tok_dir, out_dir):
    model_bf16 = copy.deepcopy(model).to(torch.bfloat16)
    model_bf16.save_pretrained(out_dir, max_shard_size="14MB")
    mtp_state = {"mtp." + k: v.to(torch.bfloat16).contiguous().cpu() for k, v in mtp.state_dict().items()}
    save_file(mtp_state, os.path.join(out_dir, "model-mtp.safetensors"), metadata={"format": "pt"})
    index = os.path.join(out_dir, "model.safetensors.index.json")
    if not os.path.exists(index):  # a single shard: write an index covering both files
        from safetensors import safe_open
        with safe_open(os.path.join(out_dir, "model.safetensors"), "pt") as f:
            wm = {k: "model.safetensors" for k in f.keys()}
        json.dump({"metadata": {}, "weight_map": wm}, open(index, "w"))
    j = json.load(open(index))
    for k in mtp_state:
        j["weight_map"][k] = "model-mtp.safetensors"
    json.dump(j, open(index, "w"), indent=2)
    cfg = json.load(open(os.path.join(out_dir, "config.json")))
    cfg["num_nextn_predict_layers"] = 1
    json.dump(cfg, open(os.path.join(out_dir, "config.json"), "w"), indent=2)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        with open(os.path.join(tok_dir, f)) as src, open(os.path.join(out_dir, f), "w") as dst:
            dst.write(src.read())
        os.remove(os.path.join(tok_dir, f))
    os.rmdir(tok_dir)
    gen = {"eos_token_id": [cfg["eos_token_id"], cfg["pad_token_id"]], "pad_token_id": cfg["pad_token_id"],
           "do_sample": True, "temperature": 0.7, "top_p": 0.9, "top_k": 40}
    json.dump(gen, open(os.path.join(out_dir, "generation_config.json"), "w"), indent=2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--heldout", default="models/hibana-tiny/heldout.txt",
                    help="evaluation text that is not in the corpus")
    ap.add_argument("--out", required=True)
    ap.add_argument("--minutes", type=float, default=7.0)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--smoke", action="store_true", help="a 20-second run to test the pipeline")
    args = ap.parse_args()
    t_start = time.time()
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    device = "cuda"
    os.makedirs(args.out, exist_ok=True)
    tok_dir = os.path.join(args.out, "_tok")
    os.makedirs(tok_dir, exist_ok=True)
    docs = [json.loads(l) for l in open(os.path.join(args.corpus, "train.jsonl"), encoding="utf-8")]
    tok = train_tokenizer(docs, tok_dir)
    stream = build_stream(tok, docs, args.seed)
    heldout_text = open(args.heldout, encoding="utf-8").read()
    heldout = torch.tensor(tok.encode(heldout_text).ids, dtype=torch.int32)
    print(f"tokenizer {tok.get_vocab_size()} tokens; corpus {len(stream)} tokens; held-out {len(heldout)}"
          f" tokens; {time.time() - t_start:.0f}s", flush=True)

    config = make_config(tok)
    config._attn_implementation = "sdpa"
    model = transformers.Qwen3NextForCausalLM(config).to(device)
    mtp = Mtp(model).to(device)
    try:
        from transformers.models.qwen3_next.modeling_qwen3_next import load_balancing_loss_func as aux_fn
    except ImportError:
        aux_fn = None
    if aux_fn is not None:  # check that the base model can return router logits
        try:
            with torch.no_grad():
                model.model(input_ids=torch.zeros(1, 8, dtype=torch.long, device=device),
                            output_router_logits=True)
        except TypeError as e:
            print("no router logits from the model; training without the balance loss:", e)
            aux_fn = None
    n_params = sum(p.numel() for p in model.parameters()) + sum(p.numel() for p in mtp.parameters())
    print(f"parameters {n_params / 1e6:.2f} M (bf16 {2 * n_params / 1e6:.1f} MB)", flush=True)
    params = list(model.parameters()) + list(mtp.parameters())
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    budget = 20.0 if args.smoke else args.minutes * 60.0
    warmup, total_steps = 100, None
    log = []
    step, t0 = 0, time.time()
    gen = torch.Generator().manual_seed(args.seed)
    while True:
        elapsed = time.time() - t0
        if elapsed > budget or (total_steps and step >= total_steps):
            break
        if step == 30:  # size the cosine schedule to the time budget
            total_steps = max(60, int(budget / (elapsed / 30)))
            print(f"{elapsed / 30 * 1000:.0f} ms/step -> {total_steps} steps", flush=True)
        starts = torch.randint(0, len(stream) - SEQ - 1, (args.batch,), generator=gen)
        x = torch.stack([stream[s:s + SEQ + 1] for s in starts.tolist()]).to(device, non_blocking=True)
        horizon = total_steps or 10_000
        lr = args.lr * min(1.0, (step + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, step / horizon))))
        for g in opt.param_groups:
            g["lr"] = lr
        with torch.autocast("cuda", dtype=torch.bfloat16):
            main, mloss, aux = losses(model, mtp, x, aux_fn)
            loss = main + MTP_WEIGHT * mloss + config.router_aux_loss_coef * aux
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if step % 25 == 0:
            rec = {"step": step, "seconds": time.time() - t0, "loss": main.item(), "mtp_loss": mloss.item(),
                   "aux": float(aux.detach()), "lr": lr, "tokens": (step + 1) * args.batch * SEQ}
            log.append(rec)
            print(json.dumps(rec), flush=True)
        step += 1
    train_seconds = time.time() - t0
    model.eval()
    save_checkpoint(model, mtp, tok_dir, args.out)
    # Evaluate the saved bf16 checkpoint exactly as hibana will read it (fp32 compute).
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(args.out, dtype=torch.float32).to(device)
    mtp32 = copy.deepcopy(mtp).float()
    for p in mtp32.parameters():
        p.data = p.data.to(torch.bfloat16).float()
    with torch.autocast("cuda", enabled=False):
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        ev = evaluate(reloaded, mtp32, heldout, device)
    prompt = "def fibonacci(n):"
    ids = torch.tensor([tok.encode(prompt).ids], device=device)
    sample = reloaded.generate(ids, max_new_tokens=80, do_sample=False)
    sample_text = tok.decode(sample[0].tolist())
    summary = {"transformers": transformers.__version__, "torch": torch.__version__, "steps": step,
               "train_seconds": train_seconds, "tokens_seen": step * args.batch * SEQ,
               "parameters": n_params, "final_train_loss": log[-1]["loss"] if log else None,
               "heldout": ev, "sample_prompt": prompt, "sample_greedy": sample_text,
               "corpus_tokens": len(stream), "vocab": tok.get_vocab_size()}
    json.dump({"summary": summary, "log": log}, open(os.path.join(args.out, "training_log.json"), "w"), indent=1)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.plot([r["tokens"] / 1e6 for r in log], [r["loss"] for r in log], label="next token (train)")
        ax.plot([r["tokens"] / 1e6 for r in log], [r["mtp_loss"] for r in log], label="MTP, token after next (train)")
        ax.set_xlabel("training tokens (millions)")
        ax.set_ylabel("cross-entropy (nats)")
        ax.set_title(f"hibana-tiny: held-out perplexity {ev['perplexity']:.2f}")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(args.out, "loss.png"), dpi=110)
    except Exception as e:  # the plot is a nicety; never lose a trained model over it
        print("plot failed:", e)
    print(json.dumps(summary, indent=1), flush=True)
    print(f"total {time.time() - t_start:.0f}s", flush=True)


if __name__ == "__main__":
    main()
