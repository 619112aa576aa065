"""Annotated PNG: labelled boxes drawn with Pillow when present, else with numpy (a 3x5 pixel font); written by
models/common/png.py."""
from __future__ import annotations

import numpy as np

from ..common.png import encode_png, save_png  # noqa: F401  (the annotated image's writers)

# ultralytics' Colors palette (hex), one per class index modulo its length
_PALETTE = ("FF3838", "FF9D97", "FF701F", "FFB21D", "CFD231", "48F90A", "92CC17", "3DDB86", "1A9334", "00D4BB",
            "2C99A8", "00C2FF", "344593", "6473FF", "0018EC", "8438FF", "520085", "CB38FF", "FF95C8", "FF37C7")

# 3x5 glyphs, rows top to bottom, '#' = ink; labels are upper-cased for this font
_FONT = {c: g for c, g in zip(
    "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ.:-% ",
    ("###,#.#,#.#,#.#,###", ".#.,##.,.#.,.#.,###", "##.,..#,.#.,#..,###", "##.,..#,.#.,..#,##.", "#.#,#.#,###,..#,..#",
     "###,#..,##.,..#,##.", ".##,#..,###,#.#,###", "###,..#,.#.,.#.,.#.", "###,#.#,###,#.#,###", "###,#.#,###,..#,##.",
     ".#.,#.#,###,#.#,#.#", "##.,#.#,##.,#.#,##.", ".##,#..,#..,#..,.##", "##.,#.#,#.#,#.#,##.", "###,#..,##.,#..,###",
     "###,#..,##.,#..,#..", ".##,#..,#.#,#.#,.##", "#.#,#.#,###,#.#,#.#", "###,.#.,.#.,.#.,###", "..#,..#,..#,#.#,.#.",
     "#.#,#.#,##.,#.#,#.#", "#..,#..,#..,#..,###", "#.#,###,###,#.#,#.#", "##.,#.#,#.#,#.#,#.#", ".#.,#.#,#.#,#.#,.#.",
     "##.,#.#,##.,#..,#..", ".#.,#.#,#.#,##.,.##", "##.,#.#,##.,#.#,#.#", ".##,#..,.#.,..#,##.", "###,.#.,.#.,.#.,.#.",
     "#.#,#.#,#.#,#.#,###", "#.#,#.#,#.#,#.#,.#.", "#.#,#.#,###,###,#.#", "#.#,#.#,.#.,#.#,#.#", "#.#,#.#,.#.,.#.,.#.",
     "###,..#,.#.,#..,###", "...,...,...,...,.#.", "...,.#.,...,.#.,...", "...,...,###,...,...", "#.#,..#,.#.,#..,#.#",
     "...,...,...,...,..."))}


def color(cls: int) -> tuple:
    h = _PALETTE[int(cls) % len(_PALETTE)]
    return tuple(int(h[i:i + 2], 16) for i in (0, 2, 4))


def caption(d: dict) -> str:
    return f"{d['label']} {d['score']:.2f}"


def annotate(img: np.ndarray, detections: list[dict], use_pillow: bool | None = None) -> np.ndarray:
    """(H, W, 3) uint8 RGB + detections (predict.detect) -> a new annotated (H, W, 3) uint8 image; segmentation
    masks tinted in their class colour under the boxes."""
    img = _tint_masks(img, detections)
    if use_pillow is not False:
        try:
            from PIL import Image, ImageDraw
        except ImportError:
            if use_pillow:
                raise
        else:
            im = Image.fromarray(img)
            dr = ImageDraw.Draw(im)
            t = _thickness(img.shape)
            for d in detections:
                x1, y1, x2, y2 = d["box"]
                c = color(d["class"])
                dr.rectangle([x1, y1, x2, y2], outline=c, width=t)
                bx0, by0, bx1, by1 = dr.textbbox((x1, y1), caption(d))  # ink box when anchored at (x1, y1)
                th, tw = by1 - by0, bx1 - bx0
                ty = y1 - th - 2 * t if y1 - th - 2 * t >= 0 else y1  # label above the box, inside at the top edge
                dr.rectangle([x1, ty, x1 + tw + 2 * t, ty + th + 2 * t], fill=c)
                dr.text((x1 + t, ty + t - (by0 - y1)), caption(d), fill=(255, 255, 255))
            return np.asarray(im).copy()
    return _annotate_numpy(img, detections)


def _tint_masks(img: np.ndarray, detections: list[dict], alpha: float = 0.5) -> np.ndarray:
    masked = [d for d in detections if "mask" in d]
    if not masked:
        return img
    out = img.astype(np.float32)
    for d in reversed(masked):  # the best detection's colour on top
        m = d["mask"]
        out[m] = out[m] * (1 - alpha) + np.array(color(d["class"]), np.float32) * alpha
    return np.clip(out + 0.5, 0, 255).astype(np.uint8)


def _thickness(shape) -> int:
    return max(round((shape[0] + shape[1]) / 2 * 0.003), 2)


def _annotate_numpy(img, detections):
    out = img.copy()
    h, w = out.shape[:2]
    t = _thickness(out.shape)
    scale = max(1, t)  # font pixel size
    for d in detections:
        x1, y1, x2, y2 = (int(round(v)) for v in d["box"])
        x1, x2 = sorted((min(max(x1, 0), w - 1), min(max(x2, 0), w - 1)))
        y1, y2 = sorted((min(max(y1, 0), h - 1), min(max(y2, 0), h - 1)))
        c = np.array(color(d["class"]), np.uint8)
        out[y1:min(y1 + t, y2 + 1), x1:x2 + 1] = c
        out[max(y2 - t + 1, y1):y2 + 1, x1:x2 + 1] = c
        out[y1:y2 + 1, x1:min(x1 + t, x2 + 1)] = c
        out[y1:y2 + 1, max(x2 - t + 1, x1):x2 + 1] = c
        glyphs = _render(caption(d).upper(), scale)                            # (gh, gw) bool
        gh, gw = glyphs.shape
        ty = y1 - gh - 2 * scale if y1 - gh - 2 * scale >= 0 else y1
        bh, bw = min(gh + 2 * scale, h - ty), min(gw + 2 * scale, w - x1)
        out[ty:ty + bh, x1:x1 + bw] = c
        region = out[ty + scale:ty + scale + gh, x1 + scale:x1 + scale + gw]  # clipped at the image edge
        region[glyphs[:region.shape[0], :region.shape[1]]] = 255
    return out


def _render(text: str, scale: int) -> np.ndarray:
    """Text -> a bool bitmap (5 * scale, 4 * scale * len), one blank column between glyphs."""
    cols = []
    for ch in text:
        g = _FONT.get(ch, _FONT[" "])
        rows = np.array([[p == "#" for p in r] for r in g.split(",")], bool)  # (5, 3)
        cols.append(np.pad(rows, ((0, 0), (0, 1))))
    bitmap = np.concatenate(cols, 1) if cols else np.zeros((5, 0), bool)
    return np.kron(bitmap, np.ones((scale, scale), bool)).astype(bool)
