"""ember.nn: Module, Parameter, layers, functional, init, utils (clipping, parameter vectors), checkpoint
(gradient checkpointing)."""
from . import functional, init, utils  # noqa: F401
from .layers import (ELU, GELU, AdaptiveAvgPool2d, AdaptiveMaxPool2d, AvgPool1d, AvgPool2d,  # noqa: F401
                     BatchNorm1d, BatchNorm2d, Bilinear, Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d,
                     Dropout, Embedding, Flatten, GroupNorm, Hardswish, Identity, InstanceNorm1d, InstanceNorm2d,
                     LayerNorm, LeakyReLU, Linear, LogSoftmax, MaxPool1d, MaxPool2d, Mish, ModuleDict, ModuleList,
                     PReLU, ReLU, ReLU6, RMSNorm, Sequential, Sigmoid, SiLU, Softmax, Softplus, Tanh, Upsample,
                     relayout_linear_weight)
from .errors import LayerError  # noqa: F401

# The layers a model port reaches for less often load on first use (`import ember` stays small: a count the tests
# keep); `ember.nn.LSTM` and `from ember.nn import LSTM` work as for any name here.
_LAZY = {"EmbeddingBag": "embedding_bag", "Fold": "patches", "PixelShuffle": "patches", "PixelUnshuffle": "patches",
         "Unfold": "patches", "MultiheadAttention": "attention", "Transformer": "transformer",
         "TransformerDecoder": "transformer", "TransformerDecoderLayer": "transformer",
         "TransformerEncoder": "transformer", "TransformerEncoderLayer": "transformer", "GRU": "recurrent",
         "LSTM": "recurrent", "RNN": "recurrent", "GRUCell": "recurrent", "LSTMCell": "recurrent",
         "RNNCell": "recurrent", "checkpoint": "grad_checkpoint", "BCELoss": "losses",
         "BCEWithLogitsLoss": "losses", "CosineEmbeddingLoss": "losses",
         "CrossEntropyLoss": "losses", "HuberLoss": "losses", "KLDivLoss": "losses", "L1Loss": "losses",
         "MSELoss": "losses", "NLLLoss": "losses", "SmoothL1Loss": "losses", "MoE": "moe"}


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ember.nn' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


from .module import Module, Parameter, StateDictError, structure_version  # noqa: F401
