#!/usr/bin/env python3
"""The PyTorch/transformers side of recipes/bert_classify.lua, for a side-by-side comparison.

    v100lua recipes/bert_classify.lua --pretrained DIR --export /tmp/lex     # ours, and the split
    python3 tools/hf_finetune_wordnet.py --pretrained DIR --data /tmp/lex    # the same in PyTorch

Same starting weights (the Hugging Face folder DIR: config.json, model.safetensors, vocab.txt),
same split (the TSV files bert_classify.lua --export wrote: label, id, text), same tokenizer
(BertTokenizerFast on DIR/vocab.txt; our WordPiece gives the same ids), same recipe: AdamW
(fused, weight decay 0.01 off biases and LayerNorm), linear warmup over 10% of the steps then
linear decay, gradient norm clipped at 1.0, batches padded to their longest gloss, autocast bf16
on CUDA (--amp none for f32), eval without dropout. Prints one line per epoch and ends with
"test accuracy: x" and the seconds the fine-tuning took, as the Lua recipe does.
"""
import argparse
import math
import sys
import time

import torch
import transformers
from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast


def read_split(path):
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            label, _, text = line.rstrip("\n").split("\t", 2)
            out.append((int(label), text))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pretrained", required=True, help="Hugging Face folder (config.json, model.safetensors, vocab.txt)")
    ap.add_argument("--data", required=True, help="folder with train.tsv, val.tsv, test.tsv")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--lr", type=float, default=None, help="default: 1e-4 for hidden >= 768, else 3e-4 (as the recipe)")
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--amp", choices=["bf16", "fp16", "none"], default="bf16")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--lower", type=int, default=1)
    ap.add_argument("--train-subset", type=int, default=0, help="train on the first N glosses of train.tsv (0: all)")
    a = ap.parse_args()

    torch.manual_seed(a.seed)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    splits = {s: read_split(f"{a.data}/{s}.tsv") for s in ("train", "val", "test")}
    if a.train_subset > 0:
        splits["train"] = splits["train"][: a.train_subset]
    classes = 45 if max(l for s in splits.values() for l, _ in s) < 45 else None
    if classes is None:
        sys.exit("hf_finetune_wordnet.py: labels beyond the 45 lexicographer files")
    # from_pretrained reads DIR/vocab.txt in transformers 4 and 5 alike. (Transformers 5 renamed the
    # constructor's vocab_file to vocab and takes the old name silently into **kwargs: the
    # tokenizer then knows only the five special tokens and every word is [UNK], and the model
    # fine-tunes on nothing: 0.1411 here against our 0.8327 on the same weights.)
    tok = BertTokenizerFast.from_pretrained(a.pretrained, do_lower_case=bool(a.lower))
    if len(tok) < 100:
        sys.exit(f"hf_finetune_wordnet.py: the tokenizer of {a.pretrained} has {len(tok)} tokens: no vocab.txt read")
    cfg = BertConfig.from_pretrained(a.pretrained)
    cfg.id2label = {i: f"LABEL_{i}" for i in range(classes)}  # num_labels follows id2label
    cfg.label2id = {v: k for k, v in cfg.id2label.items()}
    model = BertForSequenceClassification.from_pretrained(a.pretrained, config=cfg).to(dev)
    lr = a.lr if a.lr is not None else (1e-4 if model.config.hidden_size >= 768 else 3e-4)

    enc = {s: tok([t for _, t in v], truncation=True, max_length=a.max_length)["input_ids"] for s, v in splits.items()}
    labels = {s: [l for l, _ in v] for s, v in splits.items()}
    # A tokenizer that does not match the vocabulary shows as [UNK] everywhere: refuse to train on it.
    n_tok = sum(len(x) for x in enc["train"])
    n_unk = sum(x.count(tok.unk_token_id) for x in enc["train"])
    if n_unk > 0.05 * n_tok:
        sys.exit(f"hf_finetune_wordnet.py: {n_unk} of {n_tok} training tokens are [UNK]: the tokenizer does not match {a.pretrained}/vocab.txt")

    def batch(split, idx):
        ids = [enc[split][i] for i in idx]
        L = max(len(x) for x in ids)
        x = torch.zeros(len(ids), L, dtype=torch.long)
        m = torch.zeros(len(ids), L, dtype=torch.long)
        for r, row in enumerate(ids):
            x[r, : len(row)] = torch.tensor(row)
            m[r, : len(row)] = 1
        y = torch.tensor([labels[split][i] for i in idx])
        return x.to(dev, non_blocking=True), m.to(dev, non_blocking=True), y.to(dev, non_blocking=True)

    decay = [p for n, p in model.named_parameters() if not (n.endswith("bias") or "LayerNorm" in n)]
    no_decay = [p for n, p in model.named_parameters() if n.endswith("bias") or "LayerNorm" in n]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, fused=dev == "cuda")
    n_train = len(splits["train"])
    steps = n_train // a.batch_size
    total = steps * a.epochs
    warm = int(math.floor(0.1 * total + 0.5))
    sched = transformers.get_linear_schedule_with_warmup(opt, warm, total)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "none": None}[a.amp]
    scaler = torch.amp.GradScaler() if dtype == torch.float16 else None

    def autocast():
        return torch.autocast(device_type=dev, dtype=dtype, enabled=dtype is not None and dev == "cuda")

    def accuracy(split):
        model.eval()
        right = 0
        with torch.no_grad():
            n = len(splits[split])
            for s in range(0, n, 256):
                x, m, y = batch(split, range(s, min(s + 256, n)))
                with autocast():
                    z = model(input_ids=x, attention_mask=m).logits.float()
                right += (z.argmax(1) == y).sum().item()
        model.train()
        return right / len(splits[split])

    print(f"hf_finetune_wordnet.py: torch {torch.__version__}, transformers {transformers.__version__}, {dev}, "
          f"{n_train} train / {len(splits['val'])} val / {len(splits['test'])} test, {classes} classes, batch {a.batch_size}, "
          f"{a.epochs} epochs x {steps} steps, AdamW lr {lr:g}, amp {a.amp}, "
          f"{sum(p.numel() for p in model.parameters())} parameters, {n_unk / n_tok:.4%} of training tokens [UNK]", flush=True)
    g = torch.Generator().manual_seed(a.seed * 1000)
    model.train()
    if dev == "cuda":
        torch.cuda.synchronize()
    t_run = time.time()
    for epoch in range(1, a.epochs + 1):
        perm = torch.randperm(n_train, generator=g).tolist()
        t0, loss_sum = time.time(), torch.zeros((), device=dev)
        for k in range(steps):
            x, m, y = batch("train", perm[k * a.batch_size:(k + 1) * a.batch_size])
            with autocast():
                loss = torch.nn.functional.cross_entropy(model(input_ids=x, attention_mask=m).logits.float(), y)
            opt.zero_grad(set_to_none=True)
            if scaler:
                scaler.scale(loss).backward()
                scaler.unscale_(opt)
            else:
                loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            if scaler:
                scaler.step(opt)
                scaler.update()
            else:
                opt.step()
            sched.step()
            loss_sum += loss.detach()
        if dev == "cuda":
            torch.cuda.synchronize()
        dt = time.time() - t0
        val = accuracy("val")
        print(f"epoch {epoch}/{a.epochs}  loss {loss_sum.item() / steps:.4f}  val acc {val:.4f}  time {dt:.1f} s  "
              f"seq/s {steps * a.batch_size / dt:.0f}", flush=True)
    if dev == "cuda":
        torch.cuda.synchronize()
    t_train = time.time() - t_run
    print(f"total time: {t_train:.0f} s (fine-tuning {t_train:.1f} s)")
    print(f"test accuracy: {accuracy('test'):.4f}")


if __name__ == "__main__":
    main()
