"""ember.quant: GGML quantization — block types, quantize/dequantize, QTensor, quantized matmul and layers.

    q = ember.quant.QTensor.quantize(w, "q4_k")          # raw GGML blocks + type + shape
    y = q.matmul_t(x)                                    # x @ W.T without materialising W in float32
    ember.quantize(model, "q4_0")                        # nn.Linear -> QLinear, in place
    ember.quant.load_quantized(model, ember.load("m.gguf"))
    ember.quant.set_activations(model, "q8")             # multiply as llama.cpp does: x quantized to 8 bits per block

Types: Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K Q8_K, bit-exact with ggml-quants.c
(plus F32/F16/BF16 as plain types). The nn parts import ember.nn only when first used.
"""
from __future__ import annotations

from . import ggml_types
from .codec import dequantize as dequantize_array
from .codec import quantize as quantize_array
from .ggml_types import GGMLType, supported_quant_types
from .qmatmul import qmatmul
from .qtensor import QTensor

_NN = {"QLinear", "quantize", "quantized_state_dict", "load_quantized", "set_activations"}


def __getattr__(name):  # the nn layer pulls in ember.nn/ember.Tensor: import it on first use
    if name in _NN:
        from . import qlinear
        return getattr(qlinear, name)
    raise AttributeError(f"module 'ember.quant' has no attribute {name!r}")


__all__ = ["GGMLType", "QTensor", "QLinear", "dequantize_array", "ggml_types", "load_quantized", "qmatmul",
           "quantize", "quantize_array", "quantized_state_dict", "set_activations", "supported_quant_types"]
