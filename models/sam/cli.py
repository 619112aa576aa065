"""`ember segment IMAGE --model DIR|hub-id --point x,y[,label] ... --box x0,y0,x1,y1 ...`: SAM masks for the
prompts (core/cli.py registers it via add_parser/main); `--everything` runs the automatic mask generator."""
from __future__ import annotations

import argparse
import json
import sys

from ...argtypes import existing_file, positive_int, writable_file
from ...cli import DEVICE_HELP, resolve_device


def _numbers(n_min: int, n_max: int, what: str):
    def parse(text: str) -> list[float]:
        try:
            v = [float(x) for x in text.split(",")]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not n_min <= len(v) <= n_max or not all(x == x and abs(x) != float("inf") for x in v):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return v
    return parse


def add_parser(sub):
    p = sub.add_parser("segment", help="segment an object in an image with Segment Anything (SAM, SlimSAM)",
                       description="Masks for points and boxes given in the image's pixels (SAM's prompt encoder "
                                   "and mask decoder on the image embedding), or every object with --everything. "
                                   "No SAM weights ship with ember: pass a folder, hub id (facebook/sam-vit-base, "
                                   "Zigeng/SlimSAM-uniform-77) or URL.")
    p.add_argument("image", type=existing_file, help="image file (JPEG/PNG/... via Pillow)")
    p.add_argument("--model", required=True, help="a SamModel folder, hub id or URL (config.json + model.safetensors)")
    p.add_argument("--point", type=_numbers(2, 3, "x,y or x,y,label"), action="append", default=[], metavar="X,Y[,L]",
                   help="a point in image pixels; label 1 (default) the object, 0 background; repeatable")
    p.add_argument("--box", type=_numbers(4, 4, "x0,y0,x1,y1"), action="append", default=[], metavar="X0,Y0,X1,Y1",
                   help="a box around the object in image pixels; several boxes are one prompt each")
    p.add_argument("--single", action="store_true",
                   help="one mask per prompt (multimask_output=False) instead of the best of three")
    p.add_argument("--everything", action="store_true", help="automatic mask generation over a point grid")
    p.add_argument("--points-per-side", type=positive_int, default=32, help="--everything's grid (default 32)")
    p.add_argument("--device", default="cpu", help=DEVICE_HELP)
    p.add_argument("--json", action="store_true", help="print each mask's score, box [x0, y0, x1, y1] and area")
    p.add_argument("--out", type=writable_file, default=None, metavar="PNG",
                   help="write the mask (the best-scoring one; --everything: all, tinted over the image) as PNG")
    p.add_argument("--cutout", type=writable_file, default=None, metavar="PNG",
                   help="write the image where the mask is, transparent elsewhere (RGBA PNG)")
    p.set_defaults(func=main)
    return p


def main(args) -> int:
    from ..common.image import load_image
    from ..common.png import save_png
    from .draw import cutout, mask_image, overlay
    from .predict import chosen, describe, load_segmenter
    if not args.everything and not (args.point or args.box):
        raise SystemExit("ember segment: give --point and/or --box, or --everything")
    seg = load_segmenter(args.model, device=resolve_device(args.device))
    img = load_image(args.image)
    if args.everything:
        from .generate import generate
        out = generate(seg.model, img, seg, points_per_crop=args.points_per_side)
        rows = [{"mask": i, "score": round(float(s), 5), "box": [int(v) for v in b], "area": int(m.sum())}
                for i, (s, b, m) in enumerate(zip(out["scores"], out["boxes"], out["masks"]))]
        mask = out["masks"][0] if out["masks"] else None
        picture = overlay(img, out["masks"])
    else:
        seg.set_image(img)
        labels = [int(p[2]) if len(p) == 3 else 1 for p in args.point]
        out = seg.predict(points=[p[:2] for p in args.point] or None, labels=labels or None,
                          boxes=args.box or None, multimask_output=not args.single)
        rows = describe(out)
        mask = chosen(out)
        picture = None
    if args.json:
        print("[" + ",".join("\n " + json.dumps(r) for r in rows) + ("\n]" if rows else "]"))
    else:
        for r in rows:
            print(f"{'prompt ' + str(r['prompt']) + ' ' if 'prompt' in r else ''}mask {r['mask']}: score "
                  f"{r['score']:.3f}  box {r['box']}  area {r['area']}")
        if not rows:
            print("no masks", file=sys.stderr)
    if args.out:
        save_png(picture if picture is not None else mask_image(mask), args.out)
        print(f"wrote {args.out}", file=sys.stderr)
    if args.cutout and mask is not None:
        save_png(cutout(img, mask), args.cutout)
        print(f"wrote {args.cutout}", file=sys.stderr)
    return 0
