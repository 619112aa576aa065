"""ember.nn: Module, Parameter, layers, functional, init, utils (clipping, parameter vectors)."""
from . import functional, init, utils  # noqa: F401
from .layers import (ELU, GELU, AdaptiveAvgPool2d, AvgPool2d, BatchNorm1d, BatchNorm2d, Conv1d, Conv2d,  # noqa: F401
                     ConvTranspose1d, ConvTranspose2d, Dropout, Embedding, Flatten, GroupNorm, Hardswish, Identity,
                     LayerNorm, LeakyReLU, Linear, LogSoftmax, MaxPool2d, Mish, ModuleDict, ModuleList, ReLU, ReLU6,
                     RMSNorm, Sequential, Sigmoid, SiLU, Softmax, Softplus, Tanh, Upsample, relayout_linear_weight)
from .attention import MultiheadAttention  # noqa: F401
from .errors import LayerError  # noqa: F401
from .transformer import (Transformer, TransformerDecoder, TransformerDecoderLayer, TransformerEncoder,  # noqa: F401
                          TransformerEncoderLayer)
from .recurrent import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNCell  # noqa: F401
from .losses import (BCELoss, BCEWithLogitsLoss, CosineEmbeddingLoss, CrossEntropyLoss, HuberLoss,  # noqa: F401
                     KLDivLoss, L1Loss, MSELoss, NLLLoss, SmoothL1Loss)
from .moe import MoE  # noqa: F401
from .module import Module, Parameter, StateDictError  # noqa: F401
