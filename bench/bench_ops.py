#!/usr/bin/env python3
"""bench/bench_ops.py: the problems of bench/bench_ops.lua in PyTorch, same BENCH names and method.

  gemm_bf16_8192, gemm_f16_8192, gemm_f32_tf32_8192   C = A @ B, 8192^3, TFLOP/s (2*M*N*K flops)
  linear_bf16_16384x1024x4096, linear_f16_...   F.linear(x, W, b), TFLOP/s (2*M*N*K flops)
  add_f32_1GiB     c = a + b on 1 GiB f32 tensors, GB/s counting 3 GiB moved
  sum_f32_1GiB     a.sum() of 1 GiB of f32, GB/s counting the 1 GiB read

Inputs from randn; `--warmup` untimed runs, then `--runs` runs each timed with a pair of
torch.cuda.Event around the op alone; the median is reported. Results are dropped after the end
event, outside the timed region. (The empty/free loop lives in bench_alloc.py.)
"""
import argparse
import statistics

import torch


def time_op(fn, runs, warmup):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    e0 = torch.cuda.Event(enable_timing=True)
    e1 = torch.cuda.Event(enable_timing=True)
    ms = []
    for _ in range(runs):
        e0.record()
        out = fn()
        e1.record()
        e1.synchronize()
        ms.append(e0.elapsed_time(e1))
        del out
    return statistics.median(ms)


def report(name, value, unit):
    print(f"BENCH {name} {value:.6g} {unit}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--only", choices=["gemm", "linear", "add", "sum"])
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_ops.py: no CUDA device")
    dev = torch.device("cuda")
    print(f"# device {dev}: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}")

    def want(group):
        return args.only is None or args.only == group

    if want("gemm"):
        n = 8192
        for dtype, name, tf32 in [(torch.bfloat16, "gemm_bf16_8192", False),
                                  (torch.float16, "gemm_f16_8192", False),
                                  (torch.float32, "gemm_f32_tf32_8192", True)]:
            old = torch.backends.cuda.matmul.allow_tf32
            torch.backends.cuda.matmul.allow_tf32 = tf32
            a = torch.randn(n, n, dtype=dtype, device=dev)
            b = torch.randn(n, n, dtype=dtype, device=dev)
            ms = time_op(lambda: a @ b, args.runs, args.warmup)
            torch.backends.cuda.matmul.allow_tf32 = old
            report(name, 2 * n ** 3 / (ms * 1e-3) / 1e12, "TFLOP/s")
            del a, b

    if want("linear"):
        m, n, k = 16384, 4096, 1024
        for dtype, label in [(torch.bfloat16, "bf16"), (torch.float16, "f16")]:
            x = torch.randn(m, k, dtype=dtype, device=dev)
            w = torch.randn(n, k, dtype=dtype, device=dev)
            b = torch.randn(n, dtype=dtype, device=dev)
            ms = time_op(lambda: torch.nn.functional.linear(x, w, b), args.runs, args.warmup)
            report(f"linear_{label}_{m}x{k}x{n}", 2 * m * n * k / (ms * 1e-3) / 1e12, "TFLOP/s")
            del x, w, b

    gib = 1 << 30
    n_1gib = gib // 4
    if want("add"):
        a = torch.randn(n_1gib, device=dev)
        b = torch.randn(n_1gib, device=dev)
        ms = time_op(lambda: a + b, args.runs, args.warmup)
        report("add_f32_1GiB", 3 * gib / (ms * 1e-3) / 1e9, "GB/s")
        del a, b
    if want("sum"):
        a = torch.randn(n_1gib, device=dev)
        ms = time_op(lambda: a.sum(), args.runs, args.warmup)
        report("sum_f32_1GiB", gib / (ms * 1e-3) / 1e9, "GB/s")


if __name__ == "__main__":
    main()
