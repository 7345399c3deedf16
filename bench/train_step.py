#!/usr/bin/env python3
"""bench/train_step.py: PyTorch's side of bench/train_step.lua, for the ratio.

The same synthetic steps: torchvision's ResNet-50 (batch 256, 224x224, channels_last, SGD with
Nesterov momentum 0.9, weight decay 5e-5, label smoothing 0.1) or Hugging Face's
BertForPreTraining (BERT-Large or -Base from their configs, sequence 128, batch 128, MLM on 15% of
positions + NSP, AdamW with weight decay off for biases and LayerNorm), fused optimizers.
Policies: O0 fp32 (TF32 allowed, as the Lua side's --tf32 on), O1 torch.autocast in the half
dtype, O2 the model in half except its norms (f32; a LayerNorm casts its input to f32 and
its output back, since torch's layer_norm wants one dtype). Torch has no built-in f32 master weights, so at O2
its fused optimizer steps the half weights directly: less work (and less exact) than ours.
fp16 uses GradScaler in eager mode; graphed steps use no scaler (GradScaler reads found_inf on
the host every step, which a CUDA graph cannot capture), so graphed fp16 here does less work
than ours too. Eager mode, no
torch.compile. Prints `BENCH torch_train_<model>_<amp>_<dtype>_<eager|graph> <samples/s>`.

usage: python3 bench/train_step.py --model resnet50|bert-large [--amp O1] [--dtype bf16]
       [--graph on] [--batch N] [--seq 128] [--steps 20] [--warmup 5]
"""
import argparse

import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet50", choices=["resnet50", "bert-large", "bert-base", "bert-tiny"])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (torch.set_num_threads; 0: torch's default)")
    ap.add_argument("--amp", default="O1", choices=["O0", "O1", "O2"])
    ap.add_argument("--dtype", default="bf16", choices=["fp16", "bf16"])
    ap.add_argument("--graph", default="off", choices=["on", "off"])
    ap.add_argument("--batch", type=int, default=0)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--cudnn-benchmark", default="on", choices=["on", "off"])
    ap.add_argument("--mlm-head", default="masked", choices=["masked", "full"],
                    help="BERT: the MLM head at 20 positions per 128 tokens only, or at every position")
    ap.add_argument("--profile", default="off", choices=["on", "off"],
                    help="after timing, one more step under torch.profiler: the kernels by GPU time")
    a = ap.parse_args()
    dev = torch.device(a.device)
    cuda = a.device == "cuda"
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = a.cudnn_benchmark == "on"
    torch.manual_seed(1)
    half = torch.float16 if a.dtype == "fp16" else torch.bfloat16
    graphed = a.graph == "on"

    if a.model == "resnet50":
        import torchvision
        batch = a.batch or 256
        model = torchvision.models.resnet50().to(dev, memory_format=torch.channels_last)
        x = torch.randn(batch, 3, 224, 224, device=dev).to(memory_format=torch.channels_last)
        y = torch.randint(0, 1000, (batch,), device=dev)
        norm_types = (nn.BatchNorm2d,)
    else:
        from transformers import BertConfig, BertForPreTraining
        batch = a.batch or 128
        sizes = {"bert-base": {}, "bert-large": dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                                                      intermediate_size=4096),
                 # Google's BERT-Tiny, with recipes/bert.lua's CPU vocabulary
                 "bert-tiny": dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512,
                                   vocab_size=8192)}
        cfg = BertConfig(**sizes[a.model])
        cfg.attn_implementation = "sdpa"
        model = BertForPreTraining(cfg).to(dev)
        L = a.seq
        ids = torch.randint(1, cfg.vocab_size, (batch, L), device=dev)
        mlm = torch.where(torch.rand(batch, L, device=dev) < 0.15, ids, torch.full_like(ids, -100))
        positions = None
        if a.mlm_head == "masked":
            P = max(1, int(20 * L / 128 + 0.5))
            positions = torch.argsort(torch.rand(batch, L, device=dev), dim=1)[:, :P].contiguous()
            mlm = torch.gather(ids, 1, positions)
        nsp = torch.randint(0, 2, (batch,), device=dev)
        types = torch.zeros_like(ids)
        mask = torch.ones_like(ids)
        norm_types = (nn.LayerNorm,)
    if a.amp == "O2":
        model.to(half)
        for m in model.modules():
            if isinstance(m, norm_types):
                m.float()
                if isinstance(m, nn.LayerNorm):
                    # PyTorch's layer_norm wants input and weight of one dtype (cuDNN's batch norm
                    # takes half data with f32 parameters): f32 in, half out, as Apex O2 does.
                    m.register_forward_pre_hook(lambda _m, args: (args[0].float(),) + tuple(args[1:]))
                    m.register_forward_hook(lambda _m, _args, out: out.to(half))
        if a.model == "resnet50":
            x = x.to(half)
    model.train()

    if a.model == "resnet50":
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-5,
                              fused=cuda)

        def loss_fn():
            return F.cross_entropy(model(x).float(), y, label_smoothing=0.1)
    else:
        decay, no_decay = [], []
        for n, p in model.named_parameters():
            (no_decay if n.endswith("bias") or "LayerNorm" in n else decay).append(p)
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                                lr=1e-4, fused=cuda, capturable=graphed)

        def loss_fn():
            if positions is not None:
                # the head on the gathered rows, as NVIDIA's BERT pretraining does
                seq, pooled = model.bert(input_ids=ids, token_type_ids=types, attention_mask=mask)[:2]
                H = seq.shape[-1]
                seq = torch.gather(seq, 1, positions.unsqueeze(-1).expand(-1, -1, H))
                pred, rel = model.cls(seq, pooled)
            else:
                out = model(input_ids=ids, token_type_ids=types, attention_mask=mask)
                pred, rel = out.prediction_logits, out.seq_relationship_logits
            V = pred.shape[-1]
            # An f32 loss from the half scores, as the Lua side computes it. Torch gets f32 math only
            # through an f32 copy of the scores (at O1 autocast would make the same copy, cross_entropy
            # being an fp32 op; at O2, without .float(), it would compute in half precision); the Lua
            # side's fused cross entropy reads the half scores and computes in f32 without the copy.
            return (F.cross_entropy(pred.float().reshape(-1, V), mlm.reshape(-1), ignore_index=-100)
                    + F.cross_entropy(rel.float(), nsp))

    use_scaler = a.amp != "O0" and a.dtype == "fp16" and not graphed
    scaler = torch.amp.GradScaler("cuda") if use_scaler else None

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(a.device, dtype=half, enabled=a.amp == "O1"):
            loss = loss_fn()
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        return loss.detach()

    if graphed:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(a.warmup):
                step()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(g):
            static_loss = step()

        def run():
            g.replay()
            return static_loss
    else:
        for _ in range(a.warmup):
            step()
        run = step

    if cuda:
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        e0.record()
        for _ in range(a.steps):
            loss = run()
        e1.record()
        e1.synchronize()
        ms = e0.elapsed_time(e1) / a.steps
    else:
        t0 = time.perf_counter()
        for _ in range(a.steps):
            loss = run()
        ms = (time.perf_counter() - t0) * 1000 / a.steps
    name = "torch_train_%s_%s_%s_%s" % (a.model.replace("-", "_"), a.amp, a.dtype, "graph" if graphed else "eager")
    if a.model != "resnet50" and a.mlm_head == "full":
        name += "_fullhead"
    print("# %s batch %d, loss %.4f, torch %s, %s%s" % (a.model, batch, loss.item(), torch.__version__, a.device,
                                                      "" if cuda else ", %d threads" % torch.get_num_threads()))
    print("BENCH %s %.1f samples/s" % (name, batch * 1000 / ms))
    print("BENCH %s_ms %.2f ms/step" % (name, ms))
    if cuda:
        print("BENCH %s_peak %.2f GiB (peak allocated; %.2f GiB peak reserved)" % (
            name, torch.cuda.max_memory_allocated() / 2 ** 30, torch.cuda.max_memory_reserved() / 2 ** 30))
    if cuda and a.profile == "on":
        from torch.profiler import profile, ProfilerActivity
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            run()
            torch.cuda.synchronize()
        # kernels by GPU time, as tools/ncu_summary.py prints ours
        rows = {}
        for ev in prof.events():
            if ev.device_type == torch.autograd.DeviceType.CUDA:
                r = rows.setdefault(ev.name, [0.0, 0])
                r[0] += ev.time_range.elapsed_us() / 1000.0
                r[1] += 1
        total = sum(r[0] for r in rows.values())
        print("# PROFILE torch one step: %.2f ms of kernel time, %d kernels" % (total, sum(r[1] for r in rows.values())))
        for n, (t, c) in sorted(rows.items(), key=lambda kv: -kv[1][0])[:45]:
            print("# PROFILE %8.3f ms %5.1f%% %5d  %s" % (t, 100 * t / total, c, n[:150]))


if __name__ == "__main__":
    main()
