"""ember.ggml: GGML's tensor types as data, like ember.dtypes: their descriptors (types.py), and numpy codecs of
every block type bit-exact with ggml-quants.c (codec.py over legacy.py and kquants.py).

Base layer: the GGUF reader (ember.io), each backend's quantized matmul and ember.quant build on it, and none of
them imports another for it. Quantized weights as a tensor are ember.QTensor (core/qtensor.py); quantizing a
model's layers is ember.quant.
"""
from __future__ import annotations

from . import types
from .codec import check_raw, dequantize, dequantize_rows, quantize
from .types import GGMLType, get, supported_quant_types

__all__ = ["GGMLType", "check_raw", "dequantize", "dequantize_rows", "get", "quantize", "supported_quant_types",
           "types"]
