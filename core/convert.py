"""`ember convert`: one entry point for weight conversions; each converter lives with its format.

    ember convert model.safetensors model.gguf --qtype q4_0   # quantize (and .gguf -> .safetensors back)
    ember convert ct2-whisper CT2_DIR OUT_DIR                  # CTranslate2 Whisper -> Hugging Face layout
    ember convert whisper-gguf HF_DIR OUT_DIR --qtype q8_0     # Whisper folder with quantized model.gguf
    ember convert yolo best.pt OUT.safetensors                 # Ultralytics .pt / .onnx -> ember YOLO weights
"""
from __future__ import annotations

import argparse
import os
import re
import sys

KINDS = ("ct2-whisper", "whisper-gguf", "yolo")


def add_parser(sub):
    p = sub.add_parser("convert", help="convert weights between formats", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("args", nargs="+", metavar="[KIND] SRC DST", help=f"KIND is one of {', '.join(KINDS)}; "
                   "without KIND the direction follows the extensions (.safetensors <-> .gguf)")
    p.add_argument("--qtype", default="q8_0", help="GGUF type for 2-d float weights (q4_0, q4_k, q8_0, f16, ...)")
    p.set_defaults(func=main)


_REMOTE = re.compile(r"^[a-z][a-z0-9+.-]*://|^[A-Za-z0-9][\w.-]*/[\w.-]+(/[\w.-]+)?$")  # a URL or an owner/name hub id


def _usage_error(a: list[str]) -> str | None:
    """What is wrong with SRC/DST before any weights are read (exit 2), or None: a missing local source
    that is no URL or hub id, or a destination file whose folder does not exist."""
    src, dst = a[-2], a[-1]
    if not os.path.exists(src) and not _REMOTE.match(src):
        return f"no such file or folder: {src}"
    folder = os.path.dirname(os.path.abspath(dst))
    if os.path.splitext(dst)[1] and not os.path.isdir(folder):
        return f"cannot write {dst}: folder {folder} does not exist"
    return None


def main(args):
    a = args.args
    problem = _usage_error(a) if len(a) >= 2 else None
    if problem:
        print(f"ember convert: error: {problem}", file=sys.stderr)
        return 2
    if a[0] in KINDS:
        if len(a) != 3:
            raise SystemExit(f"ember convert {a[0]}: expected SRC DST, got {' '.join(a[1:]) or 'nothing'}")
        kind, src, dst = a
        if kind == "ct2-whisper":
            from .models.whisper.ct2 import convert_ct2_whisper
            out = convert_ct2_whisper(src, dst)
        elif kind == "whisper-gguf":
            from .models.whisper.gguf import convert_to_gguf
            out = convert_to_gguf(src, dst, args.qtype)
        else:
            from .models.yolo.convert import convert
            out = convert(src, dst)
        print(f"{src} -> {out}")
        return 0
    if len(a) != 2:
        raise SystemExit(f"ember convert: expected [KIND] SRC DST, got {' '.join(a)}")
    from .quant.convert import run_convert
    return run_convert(argparse.Namespace(src=a[0], dst=a[1], qtype=args.qtype))
