#!/usr/bin/env python3
"""bench/bench_alloc.py: PyTorch's caching allocator, for comparison with bench/bench_alloc.c and
the empty/free loop of bench/bench_ops.lua (same sizes, same BENCH names).

  pool_pairs_<size>   torch.cuda.caching_allocator_alloc / caching_allocator_delete pairs per second
                      (the allocator itself, like vl_alloc_malloc/vl_alloc_free in bench_alloc.c)
  empty_free_<size>   torch.empty(n, dtype=uint8, device='cuda') followed by del, per second
                      (a tensor through the scripting layer, like v100.empty + t:free())

Method as in bench_alloc.c: a warm-up pair, then batches until at least `--seconds` have passed;
median of 5 runs. Output lines: BENCH <name> <value> <unit>.
"""
import argparse
import statistics
import time

import torch

SIZES = [(512, "512B"), (64 << 10, "64KiB"), (4 << 20, "4MiB"), (64 << 20, "64MiB")]


def measure(pair, seconds):
    pair()  # warm-up: the allocator caches a segment
    rates = []
    for _ in range(5):
        pairs, batch = 0, 1
        t0 = t1 = time.perf_counter()
        while t1 - t0 < seconds:
            for _ in range(batch):
                pair()
            pairs += batch
            batch = min(batch * 2, 1 << 16)
            t1 = time.perf_counter()
        rates.append(pairs / (t1 - t0))
    return statistics.median(rates)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=0.5)
    ap.add_argument("--device", type=int, default=0)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_alloc.py: no CUDA device")
    torch.cuda.set_device(args.device)
    stream = torch.cuda.current_stream()
    dev = args.device

    for nbytes, name in SIZES:
        def alloc_pair(n=nbytes):
            p = torch.cuda.caching_allocator_alloc(n, dev, stream)
            torch.cuda.caching_allocator_delete(p)

        def empty_pair(n=nbytes):
            t = torch.empty(n, dtype=torch.uint8, device="cuda")
            del t

        print(f"BENCH pool_pairs_{name} {measure(alloc_pair, args.seconds):.6g} pairs/s", flush=True)
        print(f"BENCH empty_free_{name} {measure(empty_pair, args.seconds):.6g} pairs/s", flush=True)


if __name__ == "__main__":
    main()
