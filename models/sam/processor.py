"""SamProcessor's pre- and post-processing in numpy (transformers' processing_sam.py and image_processing_pil_sam.py,
v5.x): the image resized so its longest side is 1024 (Pillow bilinear, as the processor's PIL backend), scaled to
[0, 1], normalized with the ImageNet mean and std, zero-padded to 1024x1024; prompt coordinates scaled from the
original image into that frame; the 256x256 mask logits upscaled to the padded frame, cropped to the resized image,
upscaled to the original size (bilinear, align_corners=False, as torch's F.interpolate) and thresholded.
A folder's preprocessor_config.json may change the mean, std and sizes (`Preprocessor.from_file`).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np

from ember.errors import FormatError

from ..common.image import ImageError, as_rgb, resize_bilinear

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
_BATCH_PIXELS = 1 << 22  # output pixels upscaled in one numpy pass (several small masks, or one photo-sized one)


@dataclass
class Preprocessor:
    longest_edge: int = 1024
    pad_size: int = 1024
    image_mean: tuple = IMAGENET_MEAN
    image_std: tuple = IMAGENET_STD
    rescale_factor: float = 1 / 255

    @classmethod
    def from_dict(cls, d: dict, where: str = "preprocessor_config.json") -> Preprocessor:
        """SamImageProcessor's fields (preprocessor_config.json), or a processor_config.json holding them under
        "image_processor" (transformers 5's SamProcessor.save_pretrained)."""
        if isinstance(d.get("image_processor"), dict):
            d = d["image_processor"]
        try:
            size = d.get("size") or {}
            pad = d.get("pad_size") or {}
            p = cls(longest_edge=int(size.get("longest_edge", 1024)),
                    pad_size=int(pad.get("height", 1024)),
                    image_mean=tuple(float(v) for v in d.get("image_mean", IMAGENET_MEAN)),
                    image_std=tuple(float(v) for v in d.get("image_std", IMAGENET_STD)),
                    rescale_factor=float(d.get("rescale_factor", 1 / 255)))
        except (TypeError, ValueError, AttributeError) as e:
            raise FormatError(f"ember: {where}: bad SAM image processor field ({e})") from None
        if int(pad.get("width", p.pad_size)) != p.pad_size:
            raise FormatError(f"ember: {where}: pad_size must be square, got {pad}")
        if len(p.image_mean) != 3 or len(p.image_std) != 3 or not all(s > 0 for s in p.image_std):
            raise FormatError(f"ember: {where}: image_mean / image_std must be 3 numbers, std positive")
        if not 0 < p.longest_edge <= p.pad_size:
            raise FormatError(f"ember: {where}: size.longest_edge {p.longest_edge} must be in 1 .. pad_size "
                              f"{p.pad_size}")
        return p

    @classmethod
    def from_file(cls, path) -> Preprocessor:
        """A preprocessor_config.json or processor_config.json (None: SamProcessor's defaults)."""
        if path is None:
            return cls()
        from ember.io.formats import read_json_object
        return cls.from_dict(read_json_object(path), os.fspath(path))

    # -------------------------------------------------------------- image

    def resized_shape(self, h: int, w: int) -> tuple[int, int]:
        """(new_h, new_w) with the longest side longest_edge, as SamImageProcessor._get_preprocess_shape."""
        scale = self.longest_edge * 1.0 / max(h, w)
        return int(h * scale + 0.5), int(w * scale + 0.5)

    def preprocess(self, image: np.ndarray) -> tuple[np.ndarray, tuple[int, int], tuple[int, int]]:
        """(H, W, 3) uint8 RGB -> pixel_values (1, 3, pad, pad) float32, original (H, W), resized (h, w)."""
        img = as_rgb(image)
        h, w = img.shape[:2]
        nh, nw = self.resized_shape(h, w)
        if nh < 1 or nw < 1:
            raise ImageError(f"ember: a {w}x{h} image resizes to {nw}x{nh} for SAM's {self.longest_edge}-pixel "
                             f"input: its aspect ratio is over {self.longest_edge * 2}:1")
        x = resize_bilinear_pil(img, nh, nw)                                      # (h, w, 3) uint8
        x = (x.astype(np.float64) * self.rescale_factor).astype(np.float32)
        x = (x - np.array(self.image_mean, np.float32)) / np.array(self.image_std, np.float32)
        out = np.zeros((1, 3, self.pad_size, self.pad_size), np.float32)
        out[0, :, :nh, :nw] = x.transpose(2, 0, 1)
        return out, (h, w), (nh, nw)

    # -------------------------------------------------------------- prompts

    def scale_coords(self, coords, original: tuple[int, int]) -> np.ndarray:
        """(..., 2) x, y pairs (boxes as (..., 4)) in original pixels -> the resized image's frame, float64."""
        h, w = original
        nh, nw = self.resized_shape(h, w)
        c = np.array(coords, dtype=np.float64)
        flat = c.reshape(-1, 2)
        flat[:, 0] *= nw / w
        flat[:, 1] *= nh / h
        return flat.reshape(c.shape)

    # -------------------------------------------------------------- masks

    def post_process_masks(self, masks: np.ndarray, original: tuple[int, int], resized: tuple[int, int],
                           mask_threshold: float = 0.0, binarize: bool = True) -> np.ndarray:
        """(..., 256, 256) low-resolution logits -> (..., H, W) in original pixels: bool with binarize (> threshold),
        else float32 logits. The padded-frame upscale is computed for the resized image's part only; masks go
        a few at a time (a large photo costs a few masks' float buffers)."""
        lead = masks.shape[:-2]
        flat = masks.reshape((-1,) + masks.shape[-2:]).astype(np.float32, copy=False)
        out = np.empty((flat.shape[0],) + tuple(original), bool if binarize else np.float32)
        step = max(1, _BATCH_PIXELS // max(1, original[0] * original[1]))
        for i in range(0, len(flat), step):
            up = resize_bilinear(flat[i:i + step], self.pad_size, self.pad_size, crop=resized)
            up = resize_bilinear(up, *original)
            out[i:i + step] = up > mask_threshold if binarize else up
        return out.reshape(lead + tuple(original))


# ---------------------------------------------------------------------------- resampling

def resize_bilinear_pil(img: np.ndarray, h: int, w: int) -> np.ndarray:
    """Pillow's Image.resize((w, h), BILINEAR) of an (H, W, 3) uint8 image: what transformers' PIL backend does
    (antialiased when shrinking)."""
    try:
        from PIL import Image
    except ImportError:
        raise ImageError("ember: SAM's image resize needs Pillow (pip install pillow; Pyodide ships it)") from None
    if img.shape[:2] == (h, w):
        return img
    return np.asarray(Image.fromarray(img).resize((w, h), Image.BILINEAR))
