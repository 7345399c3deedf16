#!/usr/bin/env python3
"""tools/torchvision_eval.py: torchvision's evaluation of a v100lua ResNet checkpoint, for the
recipe's `--evaluate` to be compared with.

Loads DIR/model.safetensors (a checkpoint directory of recipes/resnet50.lua, or the file itself)
into torchvision.models.<arch>(num_classes=N) with load_state_dict (strict), then evaluates the
ImageFolder ROOT/val with torchvision's standard validation transform (PIL decode, Resize(256),
CenterCrop(224), ToTensor, Normalize with ImageNet's mean and std) and prints

    torchvision: <n> images  top-1 0.xxxx  top-5 0.xxxx

usage: python3 tools/torchvision_eval.py CHECKPOINT ROOT [--arch resnet50] [--resize 256] [--size 224]
"""
import argparse
import os

import torch
import torchvision
from safetensors.torch import load_file
from torchvision import transforms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint")
    ap.add_argument("root")
    ap.add_argument("--arch", default="resnet50")
    ap.add_argument("--resize", type=int, default=256)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--batch", type=int, default=250)
    args = ap.parse_args()
    path = args.checkpoint
    if os.path.isdir(path):
        path = os.path.join(path, "model.safetensors")
    sd = load_file(path)
    classes = sd["fc.weight"].shape[0]
    model = getattr(torchvision.models, args.arch)(num_classes=classes)
    model.load_state_dict(sd, strict=True)
    model = model.cuda().eval()
    tf = transforms.Compose([transforms.Resize(args.resize), transforms.CenterCrop(args.size), transforms.ToTensor(),
                             transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    ds = torchvision.datasets.ImageFolder(os.path.join(args.root, "val"), tf)
    dl = torch.utils.data.DataLoader(ds, batch_size=args.batch, num_workers=8)
    c1 = c5 = n = 0
    with torch.no_grad():
        for x, y in dl:
            z = model(x.cuda())
            y = y.cuda()
            top5 = z.topk(5, 1).indices
            c1 += (top5[:, 0] == y).sum().item()
            c5 += (top5 == y[:, None]).any(1).sum().item()
            n += y.numel()
    print(f"torchvision {torchvision.__version__}: loaded {path} strictly ({len(sd)} tensors)")
    print(f"torchvision: {n} images  top-1 {c1 / n:.4f}  top-5 {c5 / n:.4f}")


if __name__ == "__main__":
    main()
