"""Image folders with one sub-folder per class (torchvision's ImageFolder layout):

    root/cat/001.png   root/dog/xyz.jpg ...     -> classes ["cat", "dog"], labels by sorted folder name

Images are decoded with Pillow when it is installed (it is in Pyodide too); `.npy` files need nothing."""
from __future__ import annotations

import os

import numpy as np

from ..errors import FormatError
from ..limits import check
from .dataset import Dataset

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".ppm", ".pgm", ".tif", ".tiff", ".webp", ".npy")


def decode_image(path: str, mode: str | None = "RGB") -> np.ndarray:
    """An image file -> (H, W, C) uint8 (mode "L": (H, W)); `.npy` arrays as saved."""
    if path.lower().endswith(".npy"):
        return np.load(path, allow_pickle=False)
    try:
        from PIL import Image
    except ImportError:
        raise ImportError(f"ember: decoding {path} needs Pillow (pip install pillow); .npy images need nothing") from None
    from ..io.image import check_png_chunks, convert, frame_to_array
    try:
        check_png_chunks(path, path)
        with Image.open(path) as im:
            check(path, "image pixels", im.width * im.height, "max_pixels")
            im.load()
            return frame_to_array(convert(im, mode))
    except (OSError, SyntaxError, ValueError, EOFError) as e:
        if isinstance(e, FormatError):
            raise
        raise FormatError(f"ember: {path}: not an image Pillow can read ({e})") from None
    except MemoryError:
        raise FormatError(f"ember: {path}: ran out of memory decoding the image (see "
                          "ember.limits.budget.max_pixels)") from None


class ImageFolder(Dataset):
    """`ds[i]` = (transform(image), class index). Attributes: classes, class_to_idx, samples [(path, label)]."""

    def __init__(self, root, transform=None, mode: str | None = "RGB", extensions=IMAGE_EXTENSIONS):
        self.root, self.transform, self.mode = os.fspath(root), transform, mode
        if not os.path.isdir(self.root):
            raise FileNotFoundError(f"ember: image folder {self.root} does not exist")
        self.classes = sorted(e.name for e in os.scandir(self.root) if e.is_dir())
        if not self.classes:
            raise FormatError(f"ember: {self.root} has no class sub-folders (expected root/<class>/<image>)")
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        self.samples = []
        for c in self.classes:
            for dirpath, _, files in sorted(os.walk(os.path.join(self.root, c))):
                for f in sorted(files):
                    if f.lower().endswith(tuple(extensions)):
                        self.samples.append((os.path.join(dirpath, f), self.class_to_idx[c]))
        if not self.samples:
            raise FormatError(f"ember: {self.root}: no files ending in {', '.join(extensions)} under its class folders")
        self.targets = [s[1] for s in self.samples]

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, index):
        path, label = self.samples[index]
        img = decode_image(path, self.mode)
        return (self.transform(img) if self.transform else img), label
