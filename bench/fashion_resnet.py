#!/usr/bin/env python3
"""bench/fashion_resnet.py: PyTorch's side of recipes/fashion_resnet.lua, for the images/s ratio.

The same model (ResNet-18, small-image stem: 3x3 stride-1 conv, no max-pool, 1 input channel,
torchvision's BasicBlock layout and init), batch 256, SGD + Nesterov momentum 0.9 with weight decay
off for BN and biases, label smoothing 0.1, warmup + cosine LR, and the same on-device augmentation
(random 28x28 crop of the 2-pixel padded image and a horizontal flip, as two gathers), f32 with
TF32 allowed for convolutions and matmuls (the recipe's --tf32 on). Eager mode, no torch.compile.
Prints one line per epoch and `BENCH fashion_resnet_torch_<layout> <images/s> images/s`, the
median over the epochs after the first (which includes cuDNN's algorithm search).

With --amp fp16|bf16 the forward runs under torch.autocast (fp16 with a GradScaler), as
recipes/resnet50.lua's --amp O1; the run ends with the test accuracy (10000 images) and
`total time: N s` (training, all epochs), for the recipe's time-to-accuracy comparison.

usage: python3 bench/fashion_resnet.py --root DIR [--epochs 3] [--layout nchw|nhwc] [--amp off|fp16|bf16]
"""
import argparse
import gzip
import math
import statistics
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (self.down(x) if self.down is not None else x))


class ResNet18Small(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 64, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        layers, cin = [], 64
        for cout, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
            layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(512, classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layers(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--layout", choices=["nchw", "nhwc"], default="nchw")
    ap.add_argument("--amp", choices=["off", "fp16", "bf16"], default="off")
    args = ap.parse_args()
    amp_dtype = {"off": None, "fp16": torch.float16, "bf16": torch.bfloat16}[args.amp]
    scaler = torch.amp.GradScaler("cuda", enabled=args.amp == "fp16")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    dev = torch.device("cuda")
    torch.manual_seed(1)
    imgs = torch.from_numpy(idx(f"{args.root}/train-images-idx3-ubyte.gz").copy())
    lbls = torch.from_numpy(idx(f"{args.root}/train-labels-idx1-ubyte.gz").copy()).long().to(dev)
    pad = 2
    x = torch.zeros(imgs.shape[0], 28 + 2 * pad, 28 + 2 * pad, dtype=torch.uint8)
    x[:, pad:pad + 28, pad:pad + 28] = imgs
    xtr = ((x.to(dev).float() / 255 - 0.2860) / 0.3530).unsqueeze(1).contiguous()
    fmt = torch.channels_last if args.layout == "nhwc" else torch.contiguous_format
    model = ResNet18Small().to(dev).to(memory_format=fmt)
    decay = [p for n, p in model.named_parameters() if p.ndim > 1]
    no_decay = [p for n, p in model.named_parameters() if p.ndim <= 1]
    opt = torch.optim.SGD([{"params": decay, "weight_decay": 5e-4}, {"params": no_decay, "weight_decay": 0}],
                          lr=0.1, momentum=0.9, nesterov=True)
    steps = xtr.shape[0] // args.batch
    total, warm = args.epochs * steps, steps
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / warm if s < warm else 0.5 * (1 + math.cos(math.pi * (s - warm) / max(1, total - warm))))
    cols = torch.arange(28, device=dev).view(1, 28)
    rates = []
    for epoch in range(args.epochs):
        model.train()
        perm = torch.randperm(xtr.shape[0], device=dev)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss_sum = torch.zeros((), device=dev)
        for i in range(steps):
            ix = perm[i * args.batch:(i + 1) * args.batch]
            xb, yb = xtr[ix], lbls[ix]
            B, P = xb.shape[0], xb.shape[3]
            dx = (torch.rand(B, 1, device=dev) * (2 * pad + 1)).floor().long()
            dy = (torch.rand(B, 1, device=dev) * (2 * pad + 1)).floor().long()
            flip = (torch.rand(B, 1, device=dev) < 0.5).long()
            ci = dx + cols + flip * ((28 - 1) - cols * 2)
            ri = dy + cols
            xb = xb.gather(3, ci.view(B, 1, 1, 28).expand(B, 1, P, 28).contiguous())
            xb = xb.gather(2, ri.view(B, 1, 28, 1).expand(B, 1, 28, 28).contiguous())
            xb = xb.contiguous(memory_format=fmt)
            with torch.autocast("cuda", dtype=amp_dtype or torch.float16, enabled=amp_dtype is not None):
                loss = F.cross_entropy(model(xb).float(), yb, label_smoothing=0.1)
            opt.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            sched.step()
            loss_sum += loss.detach()
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        rates.append(steps * args.batch / dt)
        print(f"epoch {epoch + 1}/{args.epochs}  loss {loss_sum.item() / steps:.4f}  time {dt:.1f} s  "
              f"images/s {rates[-1]:.0f}", flush=True)
    timg = torch.from_numpy(idx(f"{args.root}/t10k-images-idx3-ubyte.gz").copy())
    tlbl = torch.from_numpy(idx(f"{args.root}/t10k-labels-idx1-ubyte.gz").copy()).long().to(dev)
    xte = ((timg.to(dev).float() / 255 - 0.2860) / 0.3530).unsqueeze(1).contiguous(memory_format=fmt)
    model.eval()
    correct = 0
    with torch.no_grad(), torch.autocast("cuda", dtype=amp_dtype or torch.float16, enabled=amp_dtype is not None):
        for i in range(0, xte.shape[0], 1000):
            correct += (model(xte[i:i + 1000]).argmax(1) == tlbl[i:i + 1000]).sum().item()
    print(f"# torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}")
    print(f"total time: {sum(steps * args.batch / r for r in rates):.1f} s (training, {args.epochs} epochs)")
    print(f"test accuracy: {correct / xte.shape[0]:.4f}")
    name = f"fashion_resnet_torch_{args.layout}" + ("" if args.amp == "off" else "_" + args.amp)
    print(f"BENCH {name} {statistics.median(rates[1:] or rates):.6g} images/s", flush=True)


if __name__ == "__main__":
    main()
