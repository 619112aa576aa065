"""The shape every ember.ray class shares: load the model once, then map a batch (a dict of equal-length
columns, as Ray Data's `batch_format="numpy"` hands it) row by row, adding output columns and `error`."""
from __future__ import annotations

import numpy as np

from .weights import local_model, share


def column(values, dtype=object) -> np.ndarray:
    """A 1-d column of Python objects (lists, dicts, str): np.array would try to stack them."""
    out = np.empty(len(values), dtype)
    for i, v in enumerate(values):
        out[i] = v
    return out


def describe(item) -> str:
    """A short name for an input in an error message: the path or text, else its type and shape."""
    if isinstance(item, str):
        return repr(str(item)) if len(item) < 200 else f"<text of {len(item)} characters>"
    if isinstance(item, (bytes, bytearray)):
        return f"<{len(item)} bytes>"
    shape = getattr(item, "shape", None)
    return f"<{type(item).__name__}{' ' + str(tuple(shape)) if shape is not None else ''}>"


def failure(item, exc: BaseException) -> str:
    """The `error` of a failed row: the exception, prefixed with the input unless the message names it."""
    text = error_text(exc)
    return text if isinstance(item, str) and str(item) in text else f"{describe(item)}: {text}"


def error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class BatchMapper:
    """Subclasses set `inputs` (the columns they read, first present wins), `outputs` ({column: value of
    a failed row}), and define `load(model)` and `run(item, column) -> {column: value}`."""

    inputs: tuple[str, ...] = ()
    outputs: dict = {}

    def __init__(self, model=None, device: str = "cpu"):
        self.device = device
        self.load(local_model(model))

    @classmethod
    def local_path(cls, model):
        """The local file or folder `model` names, downloaded once (the driver's half of `share`)."""
        raise NotImplementedError

    @classmethod
    def share(cls, model=None):
        """Download `model` here and ray.put its files -> an ObjectRef to pass as `model=` to every actor."""
        return share(cls.local_path(model))

    def load(self, model):
        raise NotImplementedError

    def run(self, item, column: str) -> dict:
        raise NotImplementedError

    def input_column(self, batch: dict) -> str:
        for name in self.inputs:
            if name in batch:
                return name
        raise KeyError(f"ember: {type(self).__name__} needs a batch column named "
                       f"{' or '.join(repr(c) for c in self.inputs)}; the batch has {sorted(batch)}")

    def __call__(self, batch: dict) -> dict:
        name = self.input_column(batch)
        rows = self.run_rows(list(batch[name]), name)
        out = dict(batch)
        for col in self.outputs:
            out[col] = column([r[col] for r in rows])
        out["error"] = column([r["error"] for r in rows])
        return out

    def run_rows(self, items: list, name: str) -> list[dict]:
        """One result dict per item; an item that raises gets the failed-row values and its error."""
        rows = []
        for item in items:
            try:
                rows.append({**self.run(item, name), "error": ""})
            except MemoryError:
                raise
            except Exception as e:  # noqa: BLE001 (any failure of one input is that row's result)
                rows.append({**self.failed(), "error": failure(item, e)})
        return rows

    @classmethod
    def arrow_types(cls) -> dict:
        """{output column: pyarrow type} for the columns whose type Arrow cannot infer from every batch
        (an empty list of segments or detections), else {}."""
        return {}

    @classmethod
    def arrow_schema(cls, input_schema):
        """The output's pyarrow schema for `ds.write_parquet(..., schema=...)`, from the input dataset's
        `ds.schema()`: a batch whose lists are all empty then still writes the same column types."""
        import pyarrow as pa
        fields = [pa.field(n, t) for n, t in zip(input_schema.names, input_schema.types) if n not in cls.outputs]
        types = {n: pa.string() for n, v in cls.outputs.items() if v == ""} | cls.arrow_types()
        missing = [n for n in cls.outputs if n not in types]
        if missing:  # e.g. Embedder's vectors: their width is known from the data only, and never empty
            raise TypeError(f"ember: {cls.__name__}'s {', '.join(missing)} column types come from the data; "
                            "write it without a schema")
        fields += [pa.field(n, types[n]) for n in cls.outputs]
        return pa.schema(fields + [pa.field("error", pa.string())])

    def failed(self) -> dict:
        return {k: (v() if callable(v) else v) for k, v in self.outputs.items()}
