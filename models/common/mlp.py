"""Feed-forward blocks: the two-matrix MLP (GPT-2, BERT, Falcon, Phi-2: fc1 -> act -> fc2) and the gated
one (Llama's SwiGLU, Gemma's GeGLU: down(act(gate(x)) * up(x)), gate/up as two matrices or one fused
[gate | up]), activations named as config.json's `hidden_act` names them. Names are the checkpoint's."""
from __future__ import annotations

from ember import nn
from ember.errors import FormatError
from ember.nn import functional as F

ACTIVATIONS = {
    "gelu": lambda x: F.gelu(x),
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_fast": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "quick_gelu": lambda x: x * F.sigmoid(1.702 * x),
    "silu": F.silu, "swish": F.silu,
    "relu": F.relu,
    "tanh": F.tanh,
}

# the activations F.linear_act fuses into a linear layer (its `act`), by config.json's names: the same functions
LINEAR_ACTS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_fast": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
               "silu": "silu", "swish": "silu", "relu": "relu"}


def linear_then_act(layer, x, fused: str | None, act):
    """act(layer(x)); as one op (F.linear_act, its activation named `fused`: LINEAR_ACTS' name, None for none) where
    layer is a plain float Linear (its forward nn.Linear's: not LoRA's or a quantized layer) with a bias: natively the
    activation in the product's epilogue, in the page on the kernel pool; the same bits as the two."""
    if fused and type(layer).forward is nn.Linear.forward and layer.bias is not None:
        return F.linear_act(x, layer.weight, layer.bias, fused)
    return act(layer(x))


def activation(name: str, where: str = "config.json hidden_act"):
    """The function config.json's activation name stands for (a clear error for one ember lacks)."""
    try:
        return ACTIVATIONS[name]
    except (KeyError, TypeError):
        raise FormatError(f"ember: {where} {name!r} is not supported ({', '.join(sorted(ACTIVATIONS))})") from None


class MLP(nn.Module):
    """fc2(act(fc1(x))); names = (fc1, fc2) as the checkpoint names them; fc1 and act one op where they can be
    (linear_then_act)."""

    def __init__(self, dim: int, hidden: int, act: str = "gelu", bias: bool = True, names=("fc1", "fc2")):
        super().__init__()
        self.act, self.names, self.fused_act = activation(act), names, LINEAR_ACTS.get(act)
        setattr(self, names[0], nn.Linear(dim, hidden, bias=bias))   # (hidden, dim)
        setattr(self, names[1], nn.Linear(hidden, dim, bias=bias))   # (dim, hidden)

    def forward(self, x):
        h = linear_then_act(getattr(self, self.names[0]), x, self.fused_act, self.act)  # (B, T, hidden)
        return getattr(self, self.names[1])(h)  # (B, T, dim)


class GatedMLP(nn.Module):
    """down(act(gate(x)) * up(x)); fused: the name of one (2 * hidden, dim) matrix [gate | up]."""

    def __init__(self, dim: int, hidden: int, act: str = "silu", bias: bool = False,
                 names=("gate_proj", "up_proj", "down_proj"), fused: str | None = None):
        super().__init__()
        self.act, self.names, self.fused, self.hidden = activation(act), names, fused, hidden
        self.act_name = act
        if fused:
            setattr(self, fused, nn.Linear(dim, 2 * hidden, bias=bias))  # (2 * hidden, dim): gate | up
        else:
            setattr(self, names[0], nn.Linear(dim, hidden, bias=bias))  # (hidden, dim)
            setattr(self, names[1], nn.Linear(dim, hidden, bias=bias))  # (hidden, dim)
        setattr(self, names[2], nn.Linear(hidden, dim, bias=bias))      # (dim, hidden)

    def forward(self, x):
        if self.fused:
            gu = getattr(self, self.fused)(x)                            # (B, T, 2 * hidden)
            g, u = gu.narrow(-1, 0, self.hidden), gu.narrow(-1, self.hidden, self.hidden)
        else:
            g, u = getattr(self, self.names[0])(x), getattr(self, self.names[1])(x)
        return getattr(self, self.names[2])(self.act(g) * u)             # (B, T, dim)
