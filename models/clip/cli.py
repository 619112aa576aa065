"""`ember classify IMAGE --model DIR [--labels "a cat,a dog"]`: a ViT classifier's top labels (config.json's
id2label), or CLIP zero-shot over --labels (each wrapped as "a photo of {label}" unless --no-template).
Preprocessing: CLIP's processor (clip/processor.py); ViT: resize to image_size with the same bicubic resize
and the folder's preprocessor_config.json mean/std (0.5 by default, as ViTImageProcessor)."""
from __future__ import annotations

import json
import sys

import numpy as np

from ...cli import DEVICE_HELP, resolve_device


def add_parser(sub):
    from ...argtypes import existing_file
    p = sub.add_parser("classify", help="classify an image (ViT, or CLIP zero-shot with --labels)")
    p.add_argument("image", type=existing_file)
    p.add_argument("--model", required=True, help="a ViT or CLIP folder, hub id or URL")
    p.add_argument("--labels", default=None, help="comma-separated labels (CLIP zero-shot)")
    p.add_argument("--no-template", action="store_true", help="use the labels as given, not 'a photo of ...'")
    p.add_argument("--top", type=int, default=5)
    p.add_argument("--device", default="cpu", help=DEVICE_HELP)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=main)


def _preprocessor(src) -> dict:
    p = src.path("preprocessor_config.json", required=False)
    if p is None:
        return {}
    with open(p, encoding="utf-8") as f:
        return json.load(f)


def classify(image, model_src, labels=None, template="a photo of {}", device=None):
    """[(label, probability)] best first, for an image path / bytes / (H, W, 3) uint8 array."""
    from ember import hub
    from ember.models.auto import from_pretrained, load_tokenizer
    from ember.models.yolo.image import load_image
    from .processor import preprocess, resize_bicubic
    src = hub.resolve(model_src)
    model = from_pretrained(model_src, device=device)
    img = load_image(image)
    pp = _preprocessor(src)
    if type(model).__name__ == "CLIPModel":
        if not labels:
            raise ValueError("ember: CLIP classifies zero-shot: pass --labels")
        tok = load_tokenizer(model_src)
        if tok is None:
            raise ValueError(f"ember: {src.base} has no tokenizer.json for the labels")
        tok.no_padding()
        encs = tok.encode_batch([template.format(x) if template else x for x in labels])
        T = max(len(e.ids) for e in encs)
        ids, mask = np.zeros((len(encs), T), np.int64), np.zeros((len(encs), T), np.int64)
        for r, e in enumerate(encs):
            ids[r, :len(e.ids)], mask[r, :len(e.ids)] = e.ids, 1
        size = model.vision_model.image_size
        px = preprocess(img, (pp.get("size") or {}).get("shortest_edge", size), size)[None]
        probs = model.zero_shot(px, ids, mask)[0]
        names = list(labels)
    else:
        import ember
        s = model.config.image_size
        mean = np.array(pp.get("image_mean", [0.5] * 3), np.float32)
        std = np.array(pp.get("image_std", [0.5] * 3), np.float32)
        x = (resize_bicubic(img, s, s).astype(np.float32) / 255 - mean) / std
        logits = model(ember.tensor(np.ascontiguousarray(x.transpose(2, 0, 1)[None]))).logits.numpy()[0]
        z = np.exp(logits - logits.max())
        probs = z / z.sum()
        names = [model.config.labels.get(i, f"LABEL_{i}") for i in range(len(probs))]
    order = np.argsort(-probs)
    return [(names[i], float(probs[i])) for i in order]


def main(args):
    labels = [x.strip() for x in args.labels.split(",") if x.strip()] if args.labels else None
    device = resolve_device(args.device)
    out = classify(args.image, args.model, labels, None if args.no_template else "a photo of {}", device)
    out = out[:args.top]
    if args.json:
        json.dump([{"label": lab, "score": round(p, 6)} for lab, p in out], sys.stdout)
        print()
    else:
        for lab, p in out:
            print(f"{p:7.2%}  {lab}")
    return 0
