"""Small real data sets that other packages ship as files: scikit-learn's `digits` (1797 8x8 images of
handwritten digits, pixel values 0..16, from the UCI optical-recognition set) and `iris` (150 flowers,
4 features). They are read straight from the files in an installed scikit-learn's folder (or any copy
of them); scikit-learn itself is never imported."""
from __future__ import annotations

import importlib.util
import os

import numpy as np

from ..errors import FormatError
from .tables import read_csv


def sklearn_data_file(name: str) -> str:
    """The path of `sklearn/datasets/data/<name>` in the installed scikit-learn (found without importing it)."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"ember: {name} comes from scikit-learn's package folder; install "
                                f"scikit-learn (pip install scikit-learn) or pass the file's path")
    path = os.path.join(list(spec.submodule_search_locations)[0], "datasets", "data", name)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"ember: {path} is missing from this scikit-learn")
    return path


def load_digits(path=None) -> tuple[np.ndarray, np.ndarray]:
    """digits.csv.gz (a path, its bytes, or None for scikit-learn's copy) -> images (1797, 8, 8) float32
    with values 0..16 and labels (1797,) int64 in 0..9."""
    a, _ = read_csv(sklearn_data_file("digits.csv.gz") if path is None else path, header=False)
    if a.shape[1] != 65:
        raise FormatError(f"ember: {path or 'digits.csv.gz'}: rows have {a.shape[1]} fields, digits has 64 pixels + label")
    return a[:, :64].reshape(-1, 8, 8).astype(np.float32), a[:, 64].astype(np.int64)


def load_iris(path=None) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """iris.csv -> features (150, 4) float64, labels (150,) int64, class names. Its first line is
    `n_samples,n_features,<class names...>`."""
    src = sklearn_data_file("iris.csv") if path is None else path
    a, head = read_csv(src, header=True)
    try:
        n, f = int(head[0]), int(head[1])
    except (ValueError, IndexError, TypeError):
        raise FormatError(f"ember: {src}: the first line must be n_samples,n_features,names...") from None
    if a.shape != (n, f + 1):
        raise FormatError(f"ember: {src}: header says {n} x {f} + label, the table is {a.shape}")
    return a[:, :f], a[:, f].astype(np.int64), head[2:]
