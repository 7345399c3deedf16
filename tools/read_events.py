#!/usr/bin/env python3
"""tools/read_events.py: read v100lua's TensorBoard event files with TensorBoard's own reader.

    python3 tools/read_events.py RUN_DIR_OR_EVENT_FILE [--jsonl RUN_DIR/metrics.jsonl]

Prints every scalar as "step<TAB>tag<TAB>value<TAB>wall_time" read through
tensorboard.backend.event_processing.event_file_loader (which checks the TFRecord CRCs): the
Events as stored (LegacyEventFileLoader) and as TensorBoard's backend sees them (EventFileLoader,
which turns simple_value into scalar tensors), after checking that the first record is
file_version "brain.Event:2". With
--jsonl it also checks that each scalar matches the Logger's JSON line of the same step and split
(tag "<split>/<name>" or "<name>"), to float precision, and exits non-zero on any mismatch.
Needs `pip install tensorboard` (not on CI; for the GPU machine or a workstation).
"""
import argparse
import glob
import json
import math
import os
import struct
import sys


def event_files(path):
    if os.path.isdir(path):
        files = sorted(glob.glob(os.path.join(path, "events.out.tfevents.*")))
        if not files:
            sys.exit(f"read_events: no events.out.tfevents.* in {path}")
        return files
    return [path]


def tb_version():
    import tensorboard

    return tensorboard.__version__


def f32(x):  # the float the writer stores for x (beyond the float range: +-inf, as it does)
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path")
    ap.add_argument("--jsonl", help="the Logger's JSON lines to compare the scalars with")
    args = ap.parse_args()
    try:
        from tensorboard.backend.event_processing import event_file_loader as efl
    except ImportError as e:
        sys.exit(f"read_events: tensorboard is not installed ({e}); pip install tensorboard")

    # LegacyEventFileLoader gives the Events as stored (simple_value); EventFileLoader, what
    # TensorBoard's backend uses, migrates them to scalar tensors: both are checked.
    scalars = []
    files = event_files(args.path)
    for f in files:
        raw = list(efl.LegacyEventFileLoader(f).Load())
        migrated = list(efl.EventFileLoader(f).Load())
        if not raw:
            sys.exit(f"read_events: {f}: no records")
        if raw[0].file_version != "brain.Event:2":
            sys.exit(f"read_events: {f}: first record has file_version {raw[0].file_version!r}")
        if len(raw) != len(migrated):
            sys.exit(f"read_events: {f}: {len(raw)} events as stored, {len(migrated)} after migration")
        for ev, mev in zip(raw[1:], migrated[1:]):
            for v, mv in zip(ev.summary.value, mev.summary.value):
                if not v.HasField("simple_value"):
                    continue
                if mv.metadata.plugin_data.plugin_name != "scalars" or list(mv.tensor.float_val) != [v.simple_value]:
                    if not (math.isnan(v.simple_value) and math.isnan(mv.tensor.float_val[0])):
                        sys.exit(f"read_events: {f}: step {ev.step} tag {v.tag}: TensorBoard does not read it as a scalar: {mv}")
                scalars.append((ev.step, v.tag, v.simple_value, ev.wall_time))
    for s in scalars:
        print(f"{s[0]}\t{s[1]}\t{s[2]!r}\t{s[3]!r}")
    print(f"# {len(scalars)} scalars from {len(files)} file(s), read by TensorBoard {tb_version()}", file=sys.stderr)

    if args.jsonl:
        lines = {}
        with open(args.jsonl) as fh:
            for ln in fh:
                rec = json.loads(ln)
                lines.setdefault((rec["step"], rec.get("split")), []).append(rec)
        bad = 0
        for step, tag, value, wall in scalars:
            split, name = tag.split("/", 1) if "/" in tag else (None, tag)
            recs = [r for r in lines.get((step, split), []) if name in r]
            def same(x):  # NaN and +-inf are null in the JSON lines
                if x is None:
                    return not math.isfinite(value)
                return isinstance(x, (int, float)) and f32(float(x)) == value

            ok = any(same(r[name]) and abs(r["time"] - wall) < 1e-3 for r in recs)
            if not ok:
                bad += 1
                print(f"MISMATCH step {step} tag {tag} value {value!r}: JSON lines {recs}", file=sys.stderr)
        print(f"# compared with {args.jsonl}: {len(scalars) - bad} match, {bad} mismatch", file=sys.stderr)
        sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
