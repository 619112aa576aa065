"""`ember onnx MODEL.onnx --input name=file.npy ... [--device] [--json]`: run an ONNX model on .npy inputs."""
from __future__ import annotations

import argparse
import json
import sys

from ..argtypes import existing_file
from ..cli import DEVICE_HELP, resolve_device


def _input_spec(spec: str) -> tuple[str, str]:
    """NAME=FILE.npy, the file checked before the model is read."""
    name, sep, path = spec.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"{spec!r} must be NAME=FILE.npy")
    return name, existing_file(path)


def add_parser(sub):
    p = sub.add_parser("onnx", help="run an ONNX model on .npy inputs")
    p.add_argument("model", type=existing_file, help="the .onnx file")
    p.add_argument("--input", action="append", type=_input_spec, default=[], metavar="NAME=FILE.npy",
                   help="one graph input from a .npy file (repeat per input)")
    p.add_argument("--output", action="append", default=None, metavar="NAME", help="outputs to compute (default: all)")
    p.add_argument("--save", metavar="DIR", help="write each output to DIR/<name>.npy")
    p.add_argument("--device", default="cpu", help=DEVICE_HELP)
    p.add_argument("--json", action="store_true", help="print outputs as JSON (values included)")
    p.set_defaults(func=main)


def main(args):
    import os

    import numpy as np

    from . import InferenceSession
    sess = InferenceSession(args.model, device=resolve_device(args.device))
    feeds = {}
    for name, path in args.input:
        feeds[name] = np.load(path, allow_pickle=False)
    if not args.input and len(sess.get_inputs()) == 0:
        feeds = {}
    names = args.output or [o.name for o in sess.get_outputs()]
    outs = sess.run(names, feeds)
    if args.save:
        os.makedirs(args.save, exist_ok=True)
        for n, a in zip(names, outs):
            np.save(os.path.join(args.save, f"{n}.npy"), a)
    if args.json:
        json.dump({n: {"shape": list(a.shape), "dtype": str(a.dtype), "values": a.tolist()}
                   for n, a in zip(names, outs)}, sys.stdout)
        print()
    else:
        for n, a in zip(names, outs):
            print(f"{n}: shape {list(a.shape)} {a.dtype} min {a.min() if a.size else '-'} max {a.max() if a.size else '-'}")
    return 0
