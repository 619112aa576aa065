"""Tables: CSV files of numbers (a header line optional, gzipped or not) and NPZ archives, as columns
or as a dataset of (features, target) rows."""
from __future__ import annotations

import io
import os

import numpy as np

from ..errors import FormatError
from .dataset import TensorDataset
from .source import read_source


def _text(src) -> tuple[str, str]:
    data, name = read_source(src)
    try:
        return data.decode("utf-8-sig"), name
    except UnicodeDecodeError as e:
        raise FormatError(f"ember: {name}: not UTF-8 text ({e})") from None


def read_csv(src, delimiter: str = ",", header: bool | None = None, dtype=np.float64):
    """A CSV of numbers -> (array (rows, cols), header list or None). header=None: a first line with a
    field that is not a number is taken as the header."""
    text, name = _text(src)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise FormatError(f"ember: {name}: empty CSV")
    head = None
    first = [f.strip() for f in lines[0].split(delimiter)]
    if header is None:
        header = not all(_is_number(f) for f in first)
    if header:
        head, lines = first, lines[1:]
    rows = []
    width = None
    for n, ln in enumerate(lines, start=2 if header else 1):
        fields = ln.split(delimiter)
        if width is None:
            width = len(fields)
        elif len(fields) != width:
            raise FormatError(f"ember: {name}: line {n} has {len(fields)} fields, the first row {width}")
        try:
            rows.append([float(f) for f in fields])
        except ValueError:
            bad = next(f for f in fields if not _is_number(f.strip()))
            raise FormatError(f"ember: {name}: line {n}: {bad.strip()!r} is not a number") from None
    return np.asarray(rows, dtype=dtype).reshape(len(rows), width or 0), head


def _is_number(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return False


def read_npz(src) -> dict[str, np.ndarray]:
    """An .npz archive -> {name: array} (no pickles: object arrays are refused)."""
    try:
        with np.load(io.BytesIO(src) if isinstance(src, (bytes, bytearray)) else os.fspath(src),
                     allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except ValueError as e:
        raise FormatError(f"ember: {src if not isinstance(src, (bytes, bytearray)) else '<bytes>'}: "
                          f"not a pickle-free npz ({e})") from None


class TableDataset(TensorDataset):
    """Rows of a CSV or NPZ as (features float32, target): the target is column `target` (default the last)
    of a CSV, or the arrays named `x_key`/`y_key` of an NPZ."""

    def __init__(self, src, target: int = -1, x_key: str = "x", y_key: str = "y", target_dtype=np.int64):
        name = os.fspath(src) if not isinstance(src, (bytes, bytearray)) else ""
        if name.endswith(".npz"):
            z = read_npz(src)
            missing = [k for k in (x_key, y_key) if k not in z]
            if missing:
                raise FormatError(f"ember: {name}: no array named {missing[0]!r} (it holds {sorted(z)})")
            super().__init__(z[x_key].astype(np.float32), z[y_key].astype(target_dtype))
            return
        a, _ = read_csv(src)
        t = target % a.shape[1]
        super().__init__(np.delete(a, t, axis=1).astype(np.float32), a[:, t].astype(target_dtype))
