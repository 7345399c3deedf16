#!/usr/bin/env python3
"""bench/fused_ops.py: PyTorch's side of bench/fused_ops.lua, the same problems and BENCH names.

  dropout_bf16_16384x1024          F.dropout(x, 0.1) forward + backward, bf16
  xent_bf16_2560x30522             F.cross_entropy(scores.float(), labels) forward + backward from
                                   bf16 scores (what bench/train_step.py's BERT loss does)
  xent_bf16_16384x30522_fullhead   the same over every position, 15% of labels real

Method: --warmup untimed runs, then --runs runs, each timed with CUDA events around the forward
and the backward (torch.autograd.grad) alone; the median in ms.

usage: python3 bench/fused_ops.py [--runs 20] [--warmup 3] [--only dropout|xent]
"""
import argparse
import statistics

import torch
import torch.nn.functional as F


def time_op(fn, runs, warmup):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ms = []
    for _ in range(runs):
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        ms.append(e0.elapsed_time(e1))
    return statistics.median(ms)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--only", choices=["dropout", "xent"])
    a = ap.parse_args()
    torch.manual_seed(1)
    dev = "cuda"

    def report(name, ms):
        print("BENCH %s %.4f ms" % (name, ms), flush=True)

    if a.only in (None, "dropout"):
        x = torch.randn(16384, 1024, device=dev, dtype=torch.bfloat16, requires_grad=True)
        dy = torch.randn(16384, 1024, device=dev, dtype=torch.bfloat16)

        def step():
            y = F.dropout(x, 0.1, training=True)
            torch.autograd.grad(y, x, dy)

        report("dropout_bf16_16384x1024", time_op(step, a.runs, a.warmup))

    if a.only in (None, "xent"):
        V = 30522
        for n, frac, suffix in ((2560, 1.0, ""), (16384, 0.15, "_fullhead")):
            x = (torch.randn(n, V, device=dev) * 2).to(torch.bfloat16).requires_grad_()
            lab = torch.randint(0, V, (n,), device=dev)
            lab = torch.where(torch.rand(n, device=dev) < frac, lab, torch.full_like(lab, -100))

            def step():
                loss = F.cross_entropy(x.float(), lab, ignore_index=-100)
                torch.autograd.grad(loss, x)

            report("xent_bf16_%dx%d%s" % (n, V, suffix), time_op(step, a.runs, a.warmup))


if __name__ == "__main__":
    main()
