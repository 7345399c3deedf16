#!/usr/bin/env python3
"""bench/attention.py: PyTorch's side of bench/attention.lua (F.scaled_dot_product_attention,
bf16, 16 heads of 64, an additive key mask, dropout 0 and 0.1; sequence 128 batch 128 and
sequence 512 batch 32), forward and forward + backward, median of 20 runs timed with CUDA events
after 5 warm-up runs. Prints `BENCH torch_attn_<fw|fwbw>_s<L>_p<p> <ms> ms`."""
import torch
import torch.nn.functional as F


def main():
    dev = torch.device("cuda")
    for B, L in ((128, 128), (32, 512)):
        H, E = 16, 64
        q, k, v = (torch.randn(B, L, H, E, device=dev, dtype=torch.bfloat16).transpose(1, 2).requires_grad_()
                   for _ in range(3))
        mask = torch.zeros(B, 1, 1, L, device=dev, dtype=torch.bfloat16)
        dout = torch.randn(B, H, L, E, device=dev, dtype=torch.bfloat16)
        for p in (0.0, 0.1):
            for what in ("fw", "fwbw"):
                def run():
                    if what == "fw":
                        with torch.no_grad():
                            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
                    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
                    out.backward(dout)
                    q.grad = k.grad = v.grad = None
                for _ in range(5):
                    run()
                times = []
                for _ in range(20):
                    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    e0.record()
                    run()
                    e1.record()
                    e1.synchronize()
                    times.append(e0.elapsed_time(e1))
                times.sort()
                print(f"BENCH torch_attn_{what}_s{L}_p{p:g} {times[(len(times) - 1) // 2]:.4f} ms", flush=True)


if __name__ == "__main__":
    main()
