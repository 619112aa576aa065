"""Segment Anything (transformers' SamModel, modeling_sam.py v5.x; SlimSAM checkpoints by config): the image
encoder runs once per image, the prompt encoder and mask decoder once per prompt.

    model = load_model("facebook/sam-vit-base")                      # folder, hub id or URL (ember.hub)
    emb = model.get_image_embeddings(pixels)                          # (B, 256, 64, 64), the expensive part
    out = model(image_embeddings=emb, input_points=pts, input_labels=lab)   # out.pred_masks, out.iou_scores

Prompts are numpy arrays in the 1024-pixel model input frame, shaped as transformers' SamModel takes them:
input_points (B, P, N, 2), input_labels (B, P, N), input_boxes (B, P, 4); input_masks (B, 1, 256, 256) logits.
The SamProcessor equivalents (image and coordinates in, masks in original pixels out) are processor.py.
Names are the checkpoint's; loading is strict.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import ember
from ember import nn
from ember.errors import FormatError

from .config import SamConfig
from .decoder import SamMaskDecoder
from .prompt import PositionalEmbedding, SamPromptEncoder, centred
from .vision import SamVisionEncoder

# an older transformers conversion stores the prompt encoder's copy of the tied Fourier matrix too
TIED = "prompt_encoder.shared_embedding.positional_embedding"


@dataclass
class SamOutput:
    iou_scores: object   # (B, P, m) Tensor
    pred_masks: object   # (B, P, m, 256, 256) Tensor: low-resolution mask logits


class SamModel(nn.Module):
    def __init__(self, config: SamConfig):
        super().__init__()
        self.config = config
        self.shared_image_embedding = PositionalEmbedding(config.vision.num_pos_feats)
        self.vision_encoder = SamVisionEncoder(config.vision)
        self.prompt_encoder = SamPromptEncoder(config, self.shared_image_embedding)
        self.mask_decoder = SamMaskDecoder(config.decoder)
        self._pe = None  # (positional matrix the cached image_pe came from, image_pe)

    @property
    def device(self):
        return self.shared_image_embedding.positional_embedding.device

    def image_pe(self):
        """(1, C, E, E): the Fourier features of every embedding cell's centre (computed once per weights)."""
        w = self.shared_image_embedding.positional_embedding
        if self._pe is None or self._pe[0] is not w._data:
            e = self.config.prompt.image_embedding_size
            centre = (np.arange(e, dtype=np.float32) + np.float32(0.5)) / np.float32(e)   # float32, as transformers
            xy = np.stack(np.broadcast_arrays(centre[None, :], centre[:, None]), -1)     # (E, E, 2) x, y
            pe = self.shared_image_embedding(centred(xy)).permute(2, 0, 1).reshape(1, -1, e, e)
            self._pe = (w._data, pe)
        return self._pe[1]

    def get_image_embeddings(self, pixel_values):
        """(B, 3, S, S) normalized pixels (processor.preprocess) -> (B, C, E, E)."""
        with ember.no_grad():
            return self.vision_encoder(_on(pixel_values, self.device))

    def forward(self, pixel_values=None, input_points=None, input_labels=None, input_boxes=None, input_masks=None,
                image_embeddings=None, multimask_output: bool = True) -> SamOutput:
        if (pixel_values is None) == (image_embeddings is None):
            raise ValueError("ember: SamModel needs exactly one of pixel_values and image_embeddings")
        with ember.no_grad():
            emb = self.get_image_embeddings(pixel_values) if image_embeddings is None \
                else _on(image_embeddings, self.device)
            points, labels, boxes = check_prompts(emb.shape[0], input_points, input_labels, input_boxes)
            masks = None if input_masks is None else _on(input_masks, self.device)
            sparse, dense = self.prompt_encoder(points, labels, boxes, masks, batch=emb.shape[0])
            pred, iou = self.mask_decoder(emb, self.image_pe(), sparse, dense, multimask_output)
        return SamOutput(iou, pred)


def _on(x, device):
    return x.to(device) if isinstance(x, ember.Tensor) else ember.tensor(np.asarray(x, np.float32), device=device)


def check_prompts(batch, points, labels, boxes):
    """The prompt arrays as transformers' SamModel.forward checks them, as numpy (points/boxes float64, labels
    int64); labels default to 1 (foreground) for every point."""
    if points is not None:
        points = np.asarray(points, np.float64)
        if points.ndim != 4 or points.shape[-1] != 2:
            raise ValueError(f"ember: input_points must be (batch, point_batch, points, 2), got {points.shape}")
        labels = np.ones(points.shape[:3], np.int64) if labels is None else np.asarray(labels).astype(np.int64)
        if labels.shape != points.shape[:3]:
            raise ValueError(f"ember: input_labels {labels.shape} must be input_points' {points.shape[:3]}")
        if points.shape[0] != batch:
            raise ValueError(f"ember: {points.shape[0]} images of points for {batch} image embeddings")
    if boxes is not None:
        boxes = np.asarray(boxes, np.float64)
        if boxes.ndim != 3 or boxes.shape[-1] != 4:
            raise ValueError(f"ember: input_boxes must be (batch, boxes, 4), got {boxes.shape}")
        if points is not None and boxes.shape[1] != points.shape[1]:
            raise ValueError(f"ember: {boxes.shape[1]} boxes for {points.shape[1]} point prompts: give one box per "
                             "prompt")
    return points, labels, boxes


def build_from_hf(config: dict, sd: dict, where: str) -> SamModel:
    """A SamModel from config.json's dict and its state dict, strictly: the parameter count the config implies
    is checked against the tensors given before any module is built."""
    cfg = SamConfig.from_dict(config, f"{where}/config.json")
    sd = dict(sd)
    tied = sd.pop(TIED, None)
    shared = sd.get("shared_image_embedding.positional_embedding")
    if tied is not None and shared is None:
        sd["shared_image_embedding.positional_embedding"] = tied
    elif tied is not None and tuple(tied.shape) != tuple(shared.shape):
        raise FormatError(f"ember: {where}: {TIED} {tuple(tied.shape)} differs from the shared_image_embedding's "
                          f"{tuple(shared.shape)} it is tied to")
    given = sum(int(np.prod(v.shape)) for v in sd.values())
    want = cfg.n_parameters()
    if given != want:
        raise FormatError(f"ember: {where}: config.json describes a SamModel of {want:,} parameters but the weights "
                          f"hold {given:,} numbers in {len(sd)} tensors")
    model = SamModel(cfg)
    model.load_state_dict(sd, strict=True, source=where)
    return model.eval()


def load_model(source, device="cpu", dtype=None) -> SamModel:
    """SamModel from a folder, hub id ('facebook/sam-vit-base', 'Zigeng/SlimSAM-uniform-77') or URL: config.json
    plus model.safetensors (or its sharded index)."""
    from ember import hub
    from ..common.hf_folder import read_config, read_state_dict
    src = hub.resolve(source)
    config = read_config(src, require_type=False)
    if config.get("model_type", "sam") != "sam":
        raise FormatError(f"ember: {src.base}: config.json says model_type {config.get('model_type')!r}, not 'sam'")
    model = build_from_hf(config, read_state_dict(src), str(src.base))
    return model.to(device, **({"dtype": dtype} if dtype is not None else {})).eval()
