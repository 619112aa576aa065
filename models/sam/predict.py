"""Interactive segmentation: one SAM model and the embedding of the image it was last given, so each click runs
only the prompt encoder and the mask decoder (SAM's SamPredictor; transformers' SamProcessor + SamModel with
image_embeddings). Prompts are in the original image's pixels; masks come back at its size.

    seg = Segmenter(load_model("facebook/sam-vit-base"))
    seg.set_image("photo.jpg")                                           # encoder: once per image
    out = seg.predict(points=[(450, 600), (300, 200)], labels=[1, 0])   # decoder: every click
    out["masks"]   # (P, m, H, W) bool;  out["scores"]  # (P, m) predicted IoU
"""
from __future__ import annotations

import hashlib

import numpy as np

import ember
from ember.errors import EmberError

from ..common.image import load_image
from ..common.rle import mask_box
from .processor import Preprocessor

MAX_POINTS = 64   # points in one prompt (a click UI uses a handful; the automatic generator has its own grid)
MAX_BOXES = 64    # boxes in one request, each its own prompt


class PromptError(EmberError, ValueError):
    """Points, labels or boxes that SAM cannot take (outside the image, not finite, too many)."""


class Segmenter:
    def __init__(self, model, preprocessor: Preprocessor | None = None):
        self.model = model
        self.pre = preprocessor or Preprocessor()
        if self.pre.pad_size != model.config.vision.image_size:
            raise EmberError(f"ember: the processor pads to {self.pre.pad_size} but the model takes "
                             f"{model.config.vision.image_size}x{model.config.vision.image_size} images")
        self.encoder_runs = 0     # how many times the image encoder ran (the page shows it; tests assert on it)
        self.key = None           # the embedded image's digest
        self.embedding = None     # (1, C, E, E) Tensor on the model's device
        self.image = None         # the embedded image's pixels (H, W, 3) uint8
        self.original = self.resized = None

    @staticmethod
    def digest(img: np.ndarray) -> str:
        return hashlib.sha1(np.ascontiguousarray(img).data).hexdigest() + f"{img.shape}"

    def set_image(self, image) -> bool:
        """Embed `image` (path, encoded bytes or (H, W, 3) uint8) unless it is the image already embedded.
        -> whether the encoder ran."""
        steps = self.set_image_steps(image)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value

    def set_image_steps(self, image):
        """set_image() as a generator: yields (blocks done, blocks) while the encoder runs, so a caller can show
        progress and stop between blocks (closing the generator leaves the previous embedding in place)."""
        img = load_image(image)
        key = self.digest(img)
        if key == self.key:
            return False
        pixels, original, resized = self.pre.preprocess(img)
        enc = self.model.vision_encoder
        total = len(enc.layers) + 1
        with ember.no_grad():
            steps = enc.forward_steps(ember.tensor(pixels, device=self.model.device))
            while True:
                try:
                    done = next(steps)
                except StopIteration as end:
                    emb = end.value
                    break
                yield done, total
        self.embedding, self.key, self.image, self.original, self.resized = emb, key, img, original, resized
        self.encoder_runs += 1
        return True

    def predict(self, points=None, labels=None, boxes=None, multimask_output: bool = True,
                mask_input=None) -> dict:
        """One prompt of points (with labels: 1 object, 0 background) and at most one box, or several boxes
        (one prompt each) without points; coordinates in original pixels. -> {"masks": (P, m, H, W) bool,
        "scores": (P, m) float32, "low_res": (P, m, 256, 256) float32 logits}; m = 3 with multimask_output,
        else 1. mask_input: (256, 256) logits of an earlier prediction (SAM's refinement input)."""
        if self.embedding is None:
            raise EmberError("ember: no image set: call set_image() first")
        pts, lab, bxs = self.prompts(points, labels, boxes)
        masks = None
        if mask_input is not None:
            side = 4 * self.model.config.prompt.image_embedding_size
            m = np.asarray(mask_input, np.float32)
            if m.shape != (side, side) or not np.isfinite(m).all():
                raise PromptError(f"ember: mask_input must be ({side}, {side}) finite logits, got {m.shape}")
            masks = m[None, None]
        out = self.model(image_embeddings=self.embedding, input_points=pts, input_labels=lab, input_boxes=bxs,
                         input_masks=masks, multimask_output=multimask_output)
        low = out.pred_masks.numpy()[0]                                            # (P, m, 256, 256)
        scores = out.iou_scores.numpy()[0]                                         # (P, m)
        return {"masks": self.pre.post_process_masks(low, self.original, self.resized), "scores": scores,
                "low_res": low}

    def prompts(self, points, labels, boxes):
        """Original-pixel prompts checked and mapped into the model's frame: (input_points, input_labels,
        input_boxes) with a leading batch of 1, any of them None."""
        h, w = self.original
        pts = _array(points, 2, "point", MAX_POINTS)
        bxs = _array(boxes, 4, "box", MAX_BOXES)
        if pts is None and bxs is None:
            raise PromptError("ember: a SAM prompt needs at least one point or one box")
        for name, arr in (("point", pts), ("box", bxs)):
            if arr is None:
                continue
            bad = ~((arr[:, 0::2] >= 0) & (arr[:, 0::2] <= w) & (arr[:, 1::2] >= 0) & (arr[:, 1::2] <= h)).all(1)
            if bad.any():
                i = int(np.argmax(bad))
                raise PromptError(f"ember: {name} {i} at {arr[i].tolist()} is outside the {w}x{h} image "
                                  f"(coordinates are original-image pixels, 0..{w} by 0..{h})")
        if bxs is not None and ((bxs[:, 2] < bxs[:, 0]) | (bxs[:, 3] < bxs[:, 1])).any():
            i = int(np.argmax((bxs[:, 2] < bxs[:, 0]) | (bxs[:, 3] < bxs[:, 1])))
            raise PromptError(f"ember: box {i} {bxs[i].tolist()} must be x0, y0, x1, y1 with x0 <= x1 and y0 <= y1")
        lab = None
        if pts is not None:
            lab = np.ones(len(pts), np.int64) if labels is None else np.asarray(labels)
            if lab.shape != (len(pts),) or not np.isin(lab, (0, 1)).all():
                raise PromptError(f"ember: labels must be one 0 (background) or 1 (object) per point; got "
                                  f"{np.asarray(labels).ravel()[:8].tolist()} for {len(pts)} points")
            lab = lab.astype(np.int64)
            if bxs is not None and len(bxs) > 1:
                raise PromptError("ember: points go with at most one box (several boxes are one prompt each)")
            pts = self.pre.scale_coords(pts, self.original)[None, None]            # (1, 1, N, 2)
            lab = lab[None, None]                                                   # (1, 1, N)
        if bxs is not None:
            bxs = self.pre.scale_coords(bxs, self.original)[None]                  # (1, P, 4)
        return pts, lab, bxs


def _array(v, width: int, name: str, limit: int):
    """A list of points / boxes as an (n, width) float64 array, or None; finite, at most `limit` rows."""
    if v is None:
        return None
    try:
        a = np.asarray(v, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise PromptError(f"ember: {name}s must be numbers ({e})") from None
    if a.size == 0:
        return None
    if a.ndim == 1:
        a = a.reshape(1, -1)
    if a.ndim != 2 or a.shape[1] != width:
        raise PromptError(f"ember: each {name} is {width} numbers, got shape {a.shape}")
    if len(a) > limit:
        raise PromptError(f"ember: {len(a)} {name}s, over the limit of {limit} in one prompt")
    if not np.isfinite(a).all():
        bad = a[~np.isfinite(a).all(1)][0].tolist()
        raise PromptError(f"ember: {name} coordinates must be finite numbers, got {bad}")
    return a


def load_segmenter(source, device="cpu") -> Segmenter:
    """A Segmenter for a SamModel folder, hub id or URL, with the folder's preprocessor_config.json (or
    processor_config.json) if it has one."""
    from ember import hub
    from .model import load_model
    src = hub.resolve(source)
    model = load_model(source, device=device)
    pp = src.path("preprocessor_config.json", required=False) or src.path("processor_config.json", required=False)
    return Segmenter(model, Preprocessor.from_file(pp))


def best(out: dict, prompt: int = 0) -> tuple[np.ndarray, float]:
    """The highest-scoring mask of one prompt and its score."""
    i = int(np.argmax(out["scores"][prompt]))
    return out["masks"][prompt, i], float(out["scores"][prompt, i])


def chosen(out: dict) -> np.ndarray:
    """What `ember segment --out` writes: each prompt's best mask (the only one with multimask_output=False),
    united over the prompts."""
    return np.logical_or.reduce([best(out, p)[0] for p in range(out["scores"].shape[0])])


def describe(out: dict) -> list[dict]:
    """Each prompt's masks as `ember segment --json` prints them: score, box, area (pixels)."""
    rows = []
    for p in range(out["scores"].shape[0]):
        for i in range(out["scores"].shape[1]):
            m = out["masks"][p, i]
            rows.append({"prompt": p, "mask": i, "score": round(float(out["scores"][p, i]), 5),
                         "box": mask_box(m), "area": int(m.sum())})
    return rows
