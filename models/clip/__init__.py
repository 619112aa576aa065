"""CLIP text and image features, zero-shot classification, the image processor in numpy."""
