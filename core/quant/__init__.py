"""ember.quant: GGML quantization of models — QLinear layers, quantizing a model, loading GGUF weights into one,
llama.cpp's 8-bit activations, and file conversion (safetensors <-> GGUF); plus the names of what it builds on.

    q = ember.quant.QTensor.quantize(w, "q4_k")          # raw GGML blocks + type + shape (ember.qtensor)
    y = q.matmul_t(x)                                    # x @ W.T without materialising W in float32
    ember.quantize(model, "q4_0")                        # nn.Linear -> QLinear, in place
    ember.quant.load_quantized(model, ember.load("m.gguf"))
    ember.quant.set_activations(model, "q8")             # multiply as llama.cpp does: x quantized to 8 bits per block

Types: Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K Q8_K, bit-exact with ggml-quants.c (ember.ggml; plus
F32/F16/BF16 as plain types). Quantized products run on each device's kernel (ember.kernels' qmatmul: the CPU's
is core/backends/cpu_quant.py). The nn parts import ember.nn only when first used.
"""
from __future__ import annotations

from ..backends.cpu_quant import qmatmul_slabs as qmatmul
from ..ggml import types as ggml_types
from ..ggml.codec import dequantize as dequantize_array
from ..ggml.codec import quantize as quantize_array
from ..ggml.types import GGMLType, supported_quant_types
from ..qtensor import QTensor

_NN = {"QLinear", "quantize", "quantized_state_dict", "load_quantized", "set_activations"}


def __getattr__(name):  # the nn layer pulls in ember.nn/ember.Tensor: import it on first use
    if name in _NN:
        from . import qlinear
        return getattr(qlinear, name)
    raise AttributeError(f"module 'ember.quant' has no attribute {name!r}")


__all__ = ["GGMLType", "QTensor", "QLinear", "dequantize_array", "ggml_types", "load_quantized", "qmatmul",
           "quantize", "quantize_array", "quantized_state_dict", "set_activations", "supported_quant_types"]
