"""The digits recipe: scikit-learn's 1797 digits split 1437 / 360 by a seeded random_split, pixels
scaled to [0, 1], AdamW with warmup + cosine decay, batches of 64."""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

import ember
from ember.data import DataLoader, TensorDataset, load_digits, random_split
from ember.train import Trainer

from .model import DigitsCNN, init_weights

TEST_SIZE = 360


@dataclass
class TrainConfig:
    epochs: int = 4
    batch_size: int = 64
    lr: float = 1e-2
    weight_decay: float = 1e-4
    warmup: int = 10             # steps
    seed: int = 0                # weights, split and shuffling
    device: str = "cpu"

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        known = set(asdict(cls()))
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"ember: unknown training option(s) {unknown}; known: {sorted(known)}")
        return cls(**d)


def digits_arrays(source=None) -> tuple[np.ndarray, np.ndarray]:
    """(images (1797, 1, 8, 8) float32 in [0, 1], labels (1797,) int64) from digits.csv.gz (a path, its
    bytes, or None: the installed scikit-learn's copy)."""
    x, y = load_digits(source)
    return (x / np.float32(16.0))[:, None], y


def digits_loaders(cfg: TrainConfig, source=None, arrays=None):
    """(train loader shuffled by cfg.seed, test loader in order) over the fixed split of the digits (from
    `source`, or the `arrays` (x, y) already read)."""
    x, y = arrays if arrays is not None else digits_arrays(source)
    train_set, test_set = random_split(TensorDataset(x, y), [len(y) - TEST_SIZE, TEST_SIZE], seed=cfg.seed)
    return (DataLoader(train_set, cfg.batch_size, shuffle=True, seed=cfg.seed, device=cfg.device),
            DataLoader(test_set, 256, device=cfg.device))


def make_trainer(cfg: TrainConfig, source=None, arrays=None) -> Trainer:
    train_loader, test_loader = digits_loaders(cfg, source, arrays)
    model = DigitsCNN()
    init_weights(model, cfg.seed)
    model.to(cfg.device)
    opt = ember.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = ember.optim.warmup_cosine(opt, cfg.warmup, cfg.epochs * len(train_loader), min_ratio=0.05)
    return Trainer(model, opt, train_loader, val_loader=test_loader, scheduler=sched)


def train(cfg: TrainConfig | None = None, source=None, progress: bool = True):
    """Train the CNN; -> (model, history: one dict per epoch with loss, accuracy, val_loss, val_accuracy)."""
    cfg = cfg or TrainConfig()
    t = make_trainer(cfg, source)
    return t.model, t.fit(cfg.epochs, progress=progress)


@ember.no_grad()
def predict(model, images) -> np.ndarray:
    """(N, 8, 8) or (N, 1, 8, 8) images in [0, 1] -> (N, 10) class probabilities."""
    x = np.asarray(images, np.float32).reshape(-1, 1, 8, 8)
    dev = next(model.parameters()).device
    was = model.training
    model.eval()
    probs = model(ember.tensor(x, device=dev)).softmax(-1).numpy()
    model.train(was)
    return probs
