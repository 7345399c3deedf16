#!/usr/bin/env python3
"""PyTorch's side of bench/cpu_ops.lua: the same CPU ops on the same 2048 x 1024 f32 tensors, with
one thread and with the given count (default: what torch uses), in ms (median of 7 runs after a
warm-up).

    python3 bench/cpu_ops.py [--threads N]      # beside: V100LUA_NUM_THREADS=N v100lua bench/cpu_ops.lua
"""
import argparse
import time

import torch
import torch.nn.functional as F


def bench(f):
    f()
    ts = []
    for _ in range(7):
        t0 = time.perf_counter()
        f()
        ts.append((time.perf_counter() - t0) * 1000)
    return sorted(ts)[3]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    a = ap.parse_args()
    x = torch.randn(2048, 1024)
    y = torch.randn(2048, 1024)
    g = torch.randn(2048, 1024)
    xt = torch.randn(1024, 2048).t()
    sm = x.softmax(1)
    pos = x.abs() + 0.5
    mask = x > 0
    rows = torch.arange(2048) * 7 % 2048
    gidx = (torch.arange(2048 * 1024) * 7 % 1024).reshape(2048, 1024)
    for th in ([1, a.threads] if a.threads > 1 else [1]):
        torch.set_num_threads(th)
        r = [
            ("add", lambda: x + y),
            ("add(strided)", lambda: x + xt),
            ("mul_scalar", lambda: x * 1.1),
            ("exp", lambda: x.exp()),
            ("log", lambda: pos.log()),
            ("tanh", lambda: x.tanh()),
            ("sigmoid", lambda: x.sigmoid()),
            ("gelu", lambda: F.gelu(x)),
            ("gelu_tanh", lambda: F.gelu(x, approximate="tanh")),
            ("gelu_backward", lambda: torch.ops.aten.gelu_backward(g, x)),
            ("softmax", lambda: x.softmax(1)),
            ("log_softmax", lambda: x.log_softmax(1)),
            ("softmax_backward", lambda: torch._softmax_backward_data(g, sm, 1, torch.float32)),
            ("sum(2)", lambda: x.sum(1)),
            ("sum(1)", lambda: x.sum(0)),
            ("layernorm", lambda: F.layer_norm(x, (1024,))),
            ("erf", lambda: x.erf()),
            ("expm1", lambda: x.expm1()),
            ("log1p", lambda: pos.log1p()),
            ("remainder", lambda: x.remainder(y)),
            ("atan2", lambda: x.atan2(y)),
            ("lerp", lambda: x.lerp(y, 0.3)),
            ("nan_to_num", lambda: x.nan_to_num()),
            ("masked_select", lambda: x.masked_select(mask)),
            ("index_select", lambda: x.index_select(0, rows)),
            ("gather", lambda: x.gather(1, gidx)),
            ("max(2)", lambda: x.max(1)),
            ("max(1)", lambda: x.max(0)),
            ("sin", lambda: x.sin()),
            ("cos", lambda: x.cos()),
            ("rsqrt", lambda: pos.rsqrt()),
            ("sign", lambda: x.sign()),
        ]
        print(f"torch {torch.__version__} threads {th} (ms, 2048 x 1024 f32): "
              + "  ".join(f"{n} {bench(f):.2f}" for n, f in r), flush=True)


if __name__ == "__main__":
    main()
