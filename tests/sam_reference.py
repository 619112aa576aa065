"""Random-weight SAM checkpoints built offline with transformers for the SAM tests (no SAM weights are reachable
here), and the one piece of torchvision transformers' mask-generation pipeline needs.

Weights are redrawn with fan-in scaled Gaussians (transformers' own init is std 0.02 with zero relative position
tables and positions, which would leave most of the model untested and every mask logit near zero); on the
flat-coloured `scene()` image such a model gives masks that follow the coloured regions, so the automatic mask
generator's filters and NMS keep and drop distinct masks.
"""
from __future__ import annotations

import json
import sys
import types

import numpy as np

# (vision, prompt_encoder, mask_decoder) overrides of a small SamConfig: windowed layers whose grid needs
# padding, a global layer, and a pruned SlimSAM-like one (12 heads of width 3, odd MLP widths)
CONFIGS = {
    "small": (dict(hidden_size=48, num_hidden_layers=3, num_attention_heads=4, image_size=128, patch_size=8,
                   window_size=5, global_attn_indexes=[1], output_channels=32, num_pos_feats=16, mlp_dim=40),
              dict(hidden_size=32, image_size=128, patch_size=8, mask_input_channels=8),
              dict(hidden_size=32, mlp_dim=24, num_attention_heads=2, iou_head_hidden_dim=12)),
    "slim": (dict(hidden_size=36, num_hidden_layers=4, num_attention_heads=12, image_size=96, patch_size=8,
                  window_size=4, global_attn_indexes=[1, 3], output_channels=32, num_pos_feats=16, mlp_dim=71),
             dict(hidden_size=32, image_size=96, patch_size=8, mask_input_channels=12),
             dict(hidden_size=32, mlp_dim=37, num_attention_heads=4, iou_head_hidden_dim=20,
                  num_multimask_outputs=3, iou_head_depth=4)),
    # SamProcessor's real geometry (1024-pixel input, 32 x 32 grid here), for the processor and the generator
    "proc": (dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, image_size=1024, patch_size=32,
                  window_size=7, global_attn_indexes=[1], output_channels=32, num_pos_feats=16, mlp_dim=40),
             dict(hidden_size=32, image_size=1024, patch_size=32, mask_input_channels=8),
             dict(hidden_size=32, mlp_dim=24, num_attention_heads=2, iou_head_hidden_dim=12)),
}


def build(name: str, folder, seed: int = 0):
    """A transformers SamModel of CONFIGS[name] with redrawn weights, saved (safetensors) into `folder` with its
    processor's preprocessor_config.json (image size as the model's). -> the model (eval)."""
    import torch
    import transformers
    vision, prompt, decoder = CONFIGS[name]
    cfg = transformers.SamConfig(vision_config=vision, prompt_encoder_config=prompt, mask_decoder_config=decoder)
    torch.manual_seed(seed)
    model = transformers.SamModel(cfg).eval()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "positional_embedding" in n:
                continue  # transformers' init: a Gaussian of std hidden_size // 2, as SAM's
            if p.ndim >= 2 and "rel_pos" not in n and "pos_embed" not in n and "embed" not in n.split(".")[-2]:
                fan_in = p.shape[0] if "upscale_conv" in n else p[0].numel()  # ConvTranspose2d: (in, out, k, k)
                p.copy_(torch.randn(p.shape, generator=g) / fan_in ** 0.5)
            elif "layer_norm" in n and n.endswith("weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
    model.save_pretrained(folder, safe_serialization=True)
    size = vision["image_size"]
    processor(size).image_processor.save_pretrained(folder)  # preprocessor_config.json, as hub repos have it
    return model


def processor(size: int = 1024):
    from transformers import SamImageProcessorPil, SamProcessor
    return SamProcessor(SamImageProcessorPil(size={"longest_edge": size}, pad_size={"height": size, "width": size}))


def scene(h: int = 480, w: int = 640) -> np.ndarray:
    """Four flat-coloured rectangles on grey, (h, w, 3) uint8."""
    img = np.full((h, w, 3), 90, np.uint8)
    for (x0, y0, x1, y1), c in [((40, 40, 260, 200), (230, 40, 40)), ((330, 60, 600, 180), (40, 200, 60)),
                                ((80, 260, 300, 440), (50, 60, 220)), ((380, 250, 560, 420), (240, 230, 60))]:
        img[y0 * h // 480:y1 * h // 480, x0 * w // 640:x1 * w // 640] = c
    return img


def batched_nms(boxes, scores, idxs, iou_threshold):
    """torchvision.ops.batched_nms from torch ops: greedy by descending score, a box dropped when its IoU
    (areas (x2 - x1)(y2 - y1), as torchvision) with a kept box of its class exceeds the threshold."""
    import torch
    if len(boxes) == 0:
        return torch.zeros(0, dtype=torch.long)
    order = torch.argsort(scores, descending=True, stable=True)
    b = boxes[order].double() + (idxs[order].double() * (boxes.max().double() + 1))[:, None]
    area = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    wh = (torch.minimum(b[:, None, 2:], b[None, :, 2:]) - torch.maximum(b[:, None, :2], b[None, :, :2])).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    iou = inter / (area[:, None] + area[None, :] - inter)
    keep, dead = [], torch.zeros(len(b), dtype=torch.bool)
    for i in range(len(b)):
        if not dead[i]:
            keep.append(i)
            dead |= iou[i] > iou_threshold
    return order[torch.tensor(keep, dtype=torch.long)]


def mask_generation_pipeline(model):
    """transformers' mask-generation pipeline on `model` with the PIL image processor. PyPI's torchvision does not
    load beside torch 2.13 here, and the pipeline needs it only for batched_nms: a module with the function above
    stands in for torchvision.ops.boxes."""
    import transformers
    from transformers.models.sam import image_processing_pil_sam as pil_sam
    if "torchvision" not in sys.modules:
        tv = types.ModuleType("torchvision")
        tv.ops = types.ModuleType("torchvision.ops")
        tv.ops.boxes = types.ModuleType("torchvision.ops.boxes")
        tv.ops.boxes.batched_nms = batched_nms
        sys.modules.update({"torchvision": tv, "torchvision.ops": tv.ops, "torchvision.ops.boxes": tv.ops.boxes})

    class Processor(pil_sam.SamImageProcessorPil):
        def post_process_for_mask_generation(self, *args):  # the method's backend check wants torchvision itself
            return pil_sam._post_process_for_mask_generation(*args)

    size = model.config.vision_config.image_size
    return transformers.pipeline("mask-generation", model=model, device="cpu",
                                 image_processor=Processor(size={"longest_edge": size},
                                                           pad_size={"height": size, "width": size}))


def write_config(folder, **changes):
    """Edit a saved config.json in place (hostile-config tests)."""
    path = folder / "config.json"
    d = json.loads(path.read_text())
    for key, value in changes.items():
        sub, _, field = key.partition(".")
        (d[sub] if field else d)[field or sub] = value
    path.write_text(json.dumps(d))
