#!/usr/bin/env python3
"""tools/make_reference.py: PyTorch reference files for tests/lua/test_reference.lua.

Writes, under tests/data/ (or --out DIR):
  resnet18_ref.safetensors.gz   torchvision resnet18(num_classes=10) in eval mode: its state_dict
                                (torchvision's names), `__input__` (2x3x64x64) and `__output__`
                                (the 2x10 logits)
  bert_tiny_ref.safetensors.gz  Hugging Face BertForPreTraining (hidden 64, 2 layers, 4 heads,
                                intermediate 128, vocab 200, 64 positions) in eval mode: its
                                state_dict, `__input_ids__`, `__token_type_ids__`,
                                `__attention_mask__` (with padding), `__prediction_scores__`,
                                `__seq_relationship_score__`; the config is in the metadata

Everything runs in f32 on the CPU with deterministic algorithms. Needs torch, torchvision,
transformers and safetensors (tested with torch 2.11, torchvision 0.26, transformers 5.17,
safetensors 0.8). Usage: python3 tools/make_reference.py [--out DIR] [--seed N]

Weights are chosen so that the files compress well yet test everything:
  * every value is k * 2^e with a small integer k and a per-tensor power of two 2^e near the
    layer's kaiming scale, so values are exact in f32 (and in any decimal round trip) and
    activations keep a sane size;
  * the k of a large tensor repeat with a prime period of 8111 elements: gzip's window then finds
    long matches, which is what keeps resnet18's 11.2M parameters at about 0.45 MB instead of
    5-8 MB (independent small integers cost 4-6 bits each after gzip; measured with numpy). Two
    elements get the same k only when their flat indices differ by a multiple of the prime, so no
    two channels, rows or kernel taps share a pattern and transposed or swapped indices still
    show up in the outputs;
  * BatchNorm running statistics are the batch statistics of the input perturbed per channel
    (so eval mode visibly differs from batch statistics), BN/LayerNorm affine parameters are
    not 1/0, biases are non-zero.
"""
import argparse
import gzip
import io
import math
import os
import sys

import numpy as np
import torch

# Prime, and 8111 * 4 bytes lies within zlib's farthest match distance (32 KiB minus 262 bytes of
# lookahead = 32506 bytes; 8191 would not, and then nothing compresses: 6.9 MB instead of 0.45).
PERIOD = 8111


def small_ints(rng, n, spread=2.0, clip=7):
    return np.clip(np.round(rng.normal(0.0, spread, n)), -clip, clip)


def pow2_near(x):
    return 2.0 ** round(math.log2(x))


def fill_(t, rng, std, periodic=True, offset=0.0):
    """t <- offset + k * 2^e (k ~ round(N(0, 2))), 2^e the power of two nearest std / 2."""
    n = t.numel()
    scale = pow2_near(std / 2.0)
    if periodic and n > PERIOD:
        k = np.resize(small_ints(rng, PERIOD), n)
    else:
        k = small_ints(rng, n)
    vals = offset + k * scale
    with torch.no_grad():
        t.copy_(torch.from_numpy(vals.astype(np.float32)).view_as(t))


def fan_in(w):
    return w.shape[1] * (w[0][0].numel() if w.dim() > 2 else 1)


def save(path, tensors, metadata):
    from safetensors.torch import save as st_save

    flat = {k: v.detach().contiguous().clone() for k, v in tensors.items()}  # no shared storage
    raw = st_save(flat, metadata=metadata)
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
        gz.write(raw)
    with open(path, "wb") as f:
        f.write(buf.getvalue())
    print(f"{path}: {len(tensors)} tensors, {len(raw) / 1e6:.2f} MB raw, {len(buf.getvalue()) / 1e6:.2f} MB gzip")
    return raw


def reload(path):
    from safetensors.torch import load as st_load

    with gzip.open(path, "rb") as f:
        return st_load(f.read())


def split(loaded):
    sd = {k: v for k, v in loaded.items() if not k.startswith("__")}
    extra = {k: v for k, v in loaded.items() if k.startswith("__")}
    return sd, extra


# ------------------------------------------------------------------------------------------------
# ResNet-18


def make_resnet(out, rng):
    import torchvision

    model = torchvision.models.resnet18(num_classes=10)
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.Conv2d):
            fill_(m.weight, rng, math.sqrt(2.0 / fan_in(m.weight)))
        elif isinstance(m, torch.nn.BatchNorm2d):
            fill_(m.weight, rng, 0.25, periodic=False, offset=0.75)  # gamma in [0.75 +- 0.44]
            fill_(m.bias, rng, 0.1, periodic=False)
        elif isinstance(m, torch.nn.Linear):
            fill_(m.weight, rng, 1.0 / math.sqrt(fan_in(m.weight)))
            fill_(m.bias, rng, 0.1, periodic=False)
    x = torch.from_numpy((small_ints(rng, 2 * 3 * 64 * 64, spread=4, clip=12) / 8).astype(np.float32))
    x = x.view(2, 3, 64, 64)

    # Running statistics: this batch's statistics (momentum 1 keeps exactly the last batch), then
    # perturbed per channel so that eval differs from using batch statistics.
    bns = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    for m in bns:
        m.momentum = 1.0
    model.train()
    with torch.no_grad():
        model(x)
    for m in bns:
        m.momentum = 0.1
        c = m.num_features
        std = m.running_var.sqrt()
        with torch.no_grad():
            m.running_mean += torch.from_numpy(rng.normal(0, 0.2, c).astype(np.float32)) * std
            m.running_var *= torch.from_numpy(rng.uniform(0.6, 1.4, c).astype(np.float32))
    model.eval()
    with torch.no_grad():
        y = model(x)
    print(f"resnet18: logits {tuple(y.shape)}, |y| max {y.abs().max().item():.3g}, std {y.std().item():.3g}")

    tensors = dict(model.state_dict())
    tensors["__input__"] = x
    tensors["__output__"] = y
    path = os.path.join(out, "resnet18_ref.safetensors.gz")
    save(path, tensors, {"model": "torchvision.models.resnet18", "num_classes": "10", "mode": "eval",
                         "torch": torch.__version__})

    # Reload check: a fresh model from the file gives the stored logits bit for bit.
    sd, extra = split(reload(path))
    fresh = torchvision.models.resnet18(num_classes=10)
    fresh.load_state_dict(sd, strict=True)
    fresh.eval()
    with torch.no_grad():
        y2 = fresh(extra["__input__"])
    assert torch.equal(y2, extra["__output__"]), "resnet18 reload: logits differ"
    print("resnet18: reload check ok")


# ------------------------------------------------------------------------------------------------
# BERT (tiny)

BERT_CONFIG = dict(vocab_size=200, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                   intermediate_size=128, max_position_embeddings=64, type_vocab_size=2,
                   hidden_act="gelu", layer_norm_eps=1e-12, pad_token_id=0,
                   hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)


def make_bert(out, rng):
    from transformers import BertConfig, BertForPreTraining

    cfg = BertConfig(**BERT_CONFIG, attn_implementation="eager")
    model = BertForPreTraining(cfg)
    # The MLM decoder must be tied as in our model (weight = word embeddings, bias =
    # cls.predictions.bias); tie explicitly should this transformers version not have done it.
    pred = model.cls.predictions
    if pred.decoder.weight is not model.bert.embeddings.word_embeddings.weight:
        pred.decoder.weight = model.bert.embeddings.word_embeddings.weight
    if pred.decoder.bias is not pred.bias:
        pred.decoder.bias = pred.bias
    done = set()
    for name, p in model.named_parameters():  # tied tensors appear once
        if id(p) in done:
            continue
        done.add(id(p))
        if name.endswith("LayerNorm.weight"):
            fill_(p, rng, 0.25, periodic=False, offset=1.0)
        elif p.dim() == 1:
            fill_(p, rng, 0.1, periodic=False)
        elif "embeddings" in name:
            fill_(p, rng, 1.0)  # the pad row too: HF returns it as stored
        else:
            fill_(p, rng, 1.0 / math.sqrt(p.shape[1]))
    model.eval()

    B, L = 2, 16
    ids = torch.from_numpy(rng.integers(1, cfg.vocab_size, (B, L))).long()
    mask = torch.ones(B, L, dtype=torch.long)
    ids[0, 11:] = cfg.pad_token_id  # the first sequence is 11 tokens and 5 padding
    mask[0, 11:] = 0
    tt = torch.zeros(B, L, dtype=torch.long)
    tt[0, 6:11] = 1
    tt[1, 9:] = 1
    with torch.no_grad():
        o = model(input_ids=ids, token_type_ids=tt, attention_mask=mask)
    scores, nsp = o.prediction_logits, o.seq_relationship_logits
    print(f"bert: prediction_scores {tuple(scores.shape)} |max| {scores.abs().max().item():.3g}, "
          f"seq_relationship {tuple(nsp.shape)}")

    tensors = {k: v for k, v in model.state_dict().items()
               if not (k.endswith("position_ids") or k.endswith("token_type_ids"))}  # HF buffers
    tensors.update({"__input_ids__": ids, "__token_type_ids__": tt, "__attention_mask__": mask,
                    "__prediction_scores__": scores, "__seq_relationship_score__": nsp})
    meta = {k: str(v) for k, v in BERT_CONFIG.items()}
    meta.update({"model": "transformers.BertForPreTraining", "mode": "eval", "torch": torch.__version__})
    path = os.path.join(out, "bert_tiny_ref.safetensors.gz")
    save(path, tensors, meta)

    sd, extra = split(reload(path))
    fresh = BertForPreTraining(BertConfig(**BERT_CONFIG, attn_implementation="eager"))
    missing, unexpected = fresh.load_state_dict(sd, strict=False)
    assert not unexpected and all(k.endswith("_ids") for k in missing), (missing, unexpected)
    fresh.eval()
    with torch.no_grad():
        o2 = fresh(input_ids=extra["__input_ids__"], token_type_ids=extra["__token_type_ids__"],
                   attention_mask=extra["__attention_mask__"])
    assert torch.equal(o2.prediction_logits, extra["__prediction_scores__"]), "bert reload: scores differ"
    assert torch.equal(o2.seq_relationship_logits, extra["__seq_relationship_score__"]), "bert reload: nsp differs"
    print("bert: reload check ok")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data"))
    ap.add_argument("--seed", type=int, default=20240601)
    ap.add_argument("--only", choices=["resnet", "bert"], default=None)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    torch.set_default_dtype(torch.float32)
    torch.backends.mkldnn.enabled = False  # the plain CPU kernels: one code path, reproducible
    print(f"torch {torch.__version__}, seed {args.seed}, out {os.path.abspath(args.out)}")
    if args.only in (None, "resnet"):
        make_resnet(args.out, np.random.default_rng(args.seed))
    if args.only in (None, "bert"):
        make_bert(args.out, np.random.default_rng(args.seed + 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
