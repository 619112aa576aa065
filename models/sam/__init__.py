"""Segment Anything (SAM, SlimSAM) natively and in the page: click an object, get its mask.

    from ember.models.sam import load_model, Segmenter
    seg = Segmenter(load_model("facebook/sam-vit-base"))
    seg.set_image("photo.jpg")                                  # the image embedding, once per image
    out = seg.predict(points=[(450, 600)], labels=[1])          # masks in original pixels, scores

config.py (SamConfig), vision.py (image encoder), prompt.py (prompt encoder), decoder.py (mask decoder),
model.py (SamModel, loading), processor.py (SamProcessor's pre/post-processing), predict.py (Segmenter: the
embedding cache and prompts in original pixels), generate.py (automatic mask generation), cli.py (`ember segment`).
"""
from .model import SamModel, load_model  # noqa: F401
