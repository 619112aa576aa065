"""ember.nn: Module, Parameter, layers, functional, init, utils (clipping, parameter vectors)."""
from . import functional, init, utils  # noqa: F401
from .layers import (ELU, GELU, AdaptiveAvgPool2d, AdaptiveMaxPool2d, AvgPool1d, AvgPool2d,  # noqa: F401
                     BatchNorm1d, BatchNorm2d, Bilinear, Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d,
                     Dropout, Embedding, Flatten, GroupNorm, Hardswish, Identity, InstanceNorm1d, InstanceNorm2d,
                     LayerNorm, LeakyReLU, Linear, LogSoftmax, MaxPool1d, MaxPool2d, Mish, ModuleDict, ModuleList,
                     PReLU, ReLU, ReLU6, RMSNorm, Sequential, Sigmoid, SiLU, Softmax, Softplus, Tanh, Upsample,
                     relayout_linear_weight)
from .embedding_bag import EmbeddingBag  # noqa: F401
from .patches import Fold, PixelShuffle, PixelUnshuffle, Unfold  # noqa: F401
from .attention import MultiheadAttention  # noqa: F401
from .errors import LayerError  # noqa: F401
from .transformer import (Transformer, TransformerDecoder, TransformerDecoderLayer, TransformerEncoder,  # noqa: F401
                          TransformerEncoderLayer)
from .recurrent import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNCell  # noqa: F401
from .losses import (BCELoss, BCEWithLogitsLoss, CosineEmbeddingLoss, CrossEntropyLoss, HuberLoss,  # noqa: F401
                     KLDivLoss, L1Loss, MSELoss, NLLLoss, SmoothL1Loss)
from .moe import MoE  # noqa: F401
from .module import Module, Parameter, StateDictError  # noqa: F401
