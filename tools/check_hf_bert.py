#!/usr/bin/env python3
"""Check a BERT folder written by v100lua's bert.save_pretrained against Hugging Face transformers.

usage: python3 tools/check_hf_bert.py MODEL_DIR IO.safetensors [--class NAME] [--atol 1e-5]

MODEL_DIR: config.json + model.safetensors (bert.save_pretrained). IO.safetensors (written by
tests/lua/test_bert_hf.lua): the inputs `input_ids`, `token_type_ids`, `attention_mask` (B x L
int64) and optionally `masked_positions` (B x P int64, 0-based), plus v100lua's outputs under
transformers' names:
  BertModel                      last_hidden_state, pooler_output
  BertForPreTraining             prediction_logits, seq_relationship_logits,
                                 masked_prediction_logits (prediction_logits at masked_positions:
                                 our MLM head run on those rows only)
  BertForSequenceClassification  logits
The metadata key "class" names the transformers class (--class overrides it). The folder is loaded
with <class>.from_pretrained in float32 with eager attention; every tensor of the model must come
from the file (no missing, unexpected or mismatched keys), the MLM decoder must be tied to the word
embeddings, and every output present in IO.safetensors must agree within --atol (max |diff|) in
eval mode on the CPU. Prints one line per output; exits 1 on any failure.

Needs torch, transformers and safetensors.
"""
import argparse
import sys

OUTPUTS = {
    "BertModel": ["last_hidden_state", "pooler_output"],
    "BertForPreTraining": ["prediction_logits", "seq_relationship_logits", "masked_prediction_logits"],
    "BertForSequenceClassification": ["logits"],
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("io")
    ap.add_argument("--class", dest="cls", default=None, choices=sorted(OUTPUTS))
    ap.add_argument("--atol", type=float, default=1e-5)
    args = ap.parse_args()

    import torch
    import transformers
    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(args.io, "pt") as f:
        meta = f.metadata() or {}
    io = load_file(args.io)
    name = args.cls or meta.get("class")
    if name not in OUTPUTS:
        print(f"FAIL: no --class and no known metadata 'class' in {args.io} (got {name!r})")
        return 1

    torch.set_grad_enabled(False)
    kw = {"attn_implementation": "eager", "output_loading_info": True}
    major = int(transformers.__version__.split(".")[0])
    kw["dtype" if major >= 5 else "torch_dtype"] = torch.float32
    model, info = getattr(transformers, name).from_pretrained(args.model_dir, **kw)
    model = model.float().eval()
    ok = True
    print(f"{name} from {args.model_dir} (transformers {transformers.__version__}, torch {torch.__version__})")
    for key in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        if info.get(key):
            print(f"FAIL: {key}: {sorted(map(str, info[key]))}")
            ok = False
    if name == "BertForPreTraining":
        dec, words = model.cls.predictions.decoder, model.bert.embeddings.word_embeddings
        if dec.weight.data_ptr() != words.weight.data_ptr():
            print("FAIL: cls.predictions.decoder.weight is not tied to the word embeddings")
            ok = False

    out = model(input_ids=io["input_ids"], token_type_ids=io["token_type_ids"], attention_mask=io["attention_mask"])
    theirs = {}
    if name == "BertModel":
        theirs = {"last_hidden_state": out.last_hidden_state, "pooler_output": out.pooler_output}
    elif name == "BertForPreTraining":
        theirs = {"prediction_logits": out.prediction_logits, "seq_relationship_logits": out.seq_relationship_logits}
        if "masked_positions" in io:
            pos = io["masked_positions"].long()
            v = out.prediction_logits.shape[-1]
            theirs["masked_prediction_logits"] = torch.gather(out.prediction_logits, 1, pos[..., None].expand(-1, -1, v))
    else:
        theirs = {"logits": out.logits}

    compared = 0
    for key in OUTPUTS[name]:
        if key not in io:
            continue
        ours, ref = io[key].float(), theirs.get(key)
        if ref is None:
            print(f"FAIL: {key}: transformers gave no such output (masked_positions missing?)")
            ok = False
            continue
        if tuple(ours.shape) != tuple(ref.shape):
            print(f"FAIL: {key}: shape {tuple(ours.shape)} here, {tuple(ref.shape)} from transformers")
            ok = False
            continue
        diff = (ours - ref).abs().max().item()
        good = diff <= args.atol
        ok = ok and good
        compared += 1
        print(f"{key}: max |diff| {diff:.3e} (|max| {ref.abs().max().item():.3g}) {'ok' if good else 'FAIL'}")
    if compared == 0:
        print(f"FAIL: {args.io} holds none of the outputs of {name}: {OUTPUTS[name]}")
        ok = False
    print("ok" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
