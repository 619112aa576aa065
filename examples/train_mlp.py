"""Train a small MLP classifier on a synthetic two-spirals data set with ember's autograd and AdamW.

    python examples/train_mlp.py            # prints the loss every 50 steps and the final accuracy
"""
from __future__ import annotations

import math

import numpy as np

import ember
import ember.nn as nn
import ember.nn.functional as F


def spirals(n=400, noise=0.2, seed=0):
    """Two interleaved spirals: (2n, 2) points and (2n,) labels in {0, 1}."""
    rng = np.random.default_rng(seed)
    t = np.sqrt(rng.random(n)) * 3 * math.pi
    a = np.stack([t * np.cos(t), t * np.sin(t)], 1) / (3 * math.pi)
    x = np.concatenate([a, -a]) + rng.normal(0, noise / (3 * math.pi), (2 * n, 2))
    y = np.concatenate([np.zeros(n), np.ones(n)]).astype(np.int64)
    return x.astype(np.float32), y


class MLP(nn.Module):
    def __init__(self, hidden=64):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(),
                                 nn.Linear(hidden, 2))

    def forward(self, x):           # x (batch, 2)
        return self.net(x)          # (batch, 2) logits


def train(steps=400, lr=1e-2, seed=0, log_every=50):
    ember.manual_seed(seed)
    x_np, y_np = spirals(seed=seed)
    x, y = ember.tensor(x_np), ember.tensor(y_np)
    model = MLP()
    opt = ember.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    sched = ember.optim.warmup_cosine(opt, warmup_steps=20, total_steps=steps, min_ratio=0.05)
    losses = []
    for step in range(steps):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
        if log_every and step % log_every == 0:
            print(f"step {step:4d}  loss {losses[-1]:.4f}  lr {sched.get_last_lr()[0]:.5f}")
    with ember.no_grad():
        acc = (model(x).argmax(-1) == y).float().mean().item()
    return losses, acc


if __name__ == "__main__":
    losses, acc = train()
    print(f"final loss {losses[-1]:.4f}, train accuracy {acc:.3f}")
