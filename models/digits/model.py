"""DigitsCNN: two 3x3 convolutions and two linear layers for 8x8 grey images, 10 classes (38 k parameters)."""
from __future__ import annotations

import math

import numpy as np

import ember.nn as nn
import ember.nn.functional as F


class DigitsCNN(nn.Module):
    def __init__(self, channels: int = 16, hidden: int = 64, classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, channels, 3, padding=1)             # (c, 1, 3, 3)
        self.conv2 = nn.Conv2d(channels, 2 * channels, 3, padding=1)  # (2c, c, 3, 3)
        self.fc1 = nn.Linear(2 * channels * 16, hidden)               # (hidden, 2c * 4 * 4)
        self.fc2 = nn.Linear(hidden, classes)                         # (classes, hidden)

    def forward(self, x):                                  # x (batch, 1, 8, 8), values in [0, 1]
        x = F.relu(self.conv1(x))                          # (batch, c, 8, 8)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)         # (batch, 2c, 4, 4)
        x = F.relu(self.fc1(x.reshape(x.shape[0], -1)))    # (batch, hidden)
        return self.fc2(x)                                 # (batch, classes) logits


def init_weights(model: nn.Module, seed: int) -> None:
    """torch's default init for conv and linear layers (uniform in +-1/sqrt(fan_in) for weights, as
    kaiming_uniform(a=sqrt(5)) works out, and for biases), drawn from numpy's legacy RandomState: its
    stream is frozen, so CPython and the page (an older numpy) start from the same weights."""
    rs = np.random.RandomState(seed)
    for name, p in model.named_parameters():
        fan_in = int(np.prod(p.shape[1:])) if p.ndim > 1 else None
        if fan_in is None:  # a bias: its layer's weight fan-in
            w = dict(model.named_parameters())[name.rsplit(".", 1)[0] + ".weight"]
            fan_in = int(np.prod(w.shape[1:]))
        bound = 1.0 / math.sqrt(fan_in)
        p.copy_(rs.uniform(-bound, bound, p.shape).astype(np.float32))
