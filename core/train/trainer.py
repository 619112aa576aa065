"""A small training loop: epochs over a DataLoader, loss and accuracy per step and per epoch, validation,
a progress bar, gradient clipping, mixed precision, and a state that a checkpoint saves and restores
mid-epoch (resuming gives the loss curve of an uninterrupted run).

    history = fit(model, train_loader, opt, epochs=5, val_loader=test_loader)   # [{"epoch", "loss", ...}]

`Trainer.steps(epochs)` is the same loop as a generator of events, for callers that need to act
between steps (the page awaits there, so a pause or stop lands at once).
"""
from __future__ import annotations

import time

from ..autograd import no_grad
from ..nn import functional as F


def classification_loss(out, y):
    """Cross entropy over the last axis, for (N, C) logits or (N, T, C) sequences."""
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


def _correct(out, y) -> int | None:
    """How many argmax predictions equal the targets, when the output is logits over classes."""
    if y.dtype.is_float or out.ndim != y.ndim + 1:
        return None
    return int((out.argmax(-1) == y).sum().item())


def _split(batch):
    if isinstance(batch, dict):
        return batch["input"], batch["target"]
    return batch[0], batch[1]


class Trainer:
    def __init__(self, model, optimizer, train_loader, loss_fn=classification_loss, val_loader=None,
                 scheduler=None, scheduler_per="step", clip_grad_norm=None, mixed_precision=None):
        if scheduler_per not in ("step", "epoch"):
            raise ValueError(f"ember: scheduler_per must be 'step' or 'epoch', got {scheduler_per!r}")
        self.model, self.optimizer, self.loader, self.loss_fn = model, optimizer, train_loader, loss_fn
        self.val_loader, self.scheduler, self.scheduler_per = val_loader, scheduler, scheduler_per
        self.clip, self.mp = clip_grad_norm, mixed_precision
        self.step = self.epoch = self.batch = 0          # global step, epoch, batch within the epoch
        self._sums = [0.0, 0, 0, 0]                      # this epoch so far: loss * n, correct, counted, n
        self.history: list[dict] = []
        self._t0 = None
        first = next(iter(model.parameters()), None)
        self.device = first.device if first is not None else None  # batches move to the model's device

    def _batch(self, batch):
        x, y = _split(batch)
        dev = self.device
        if dev is not None:
            x = x if getattr(x, "device", dev) is dev else x.to(dev)
            y = y if getattr(y, "device", dev) is dev else y.to(dev)
        return x, y

    # ------------------------------------------------------------------ one step

    def train_step(self, batch) -> tuple[float, int | None, int]:
        """Forward, backward, update -> (loss, correct predictions or None, batch size)."""
        x, y = self._batch(batch)
        if self.mp is not None:
            x = self.mp.cast(x)
        out = self.model(x)
        loss = self.loss_fn(out.float() if self.mp is not None else out, y)
        self.optimizer.zero_grad()
        self.model.zero_grad()
        if self.mp is not None:
            self.mp.backward(loss)
            self.mp.step(self.optimizer, self.clip)
        else:
            loss.backward()
            if self.clip is not None:
                from ..nn.utils import clip_grad_norm_
                clip_grad_norm_(self.model.parameters(), self.clip)
            self.optimizer.step()
        if self.scheduler is not None and self.scheduler_per == "step":
            self.scheduler.step()
        with no_grad():
            correct = _correct(out.detach(), y)
        return float(loss.item()), correct, int(y.shape[0])

    @no_grad()
    def evaluate(self, loader) -> dict:
        """{"loss", "accuracy" (when the output is class logits), "n"} over a whole loader, in eval mode."""
        was = self.model.training
        self.model.eval()
        total, correct, counted, n = 0.0, 0, 0, 0
        for batch in loader:
            x, y = self._batch(batch)
            if self.mp is not None:
                x = self.mp.cast(x)
            out = self.model(x)
            out = out.float() if self.mp is not None else out
            b = int(y.shape[0])
            total += float(self.loss_fn(out, y).item()) * b
            c = _correct(out, y)
            if c is not None:
                correct, counted = correct + c, counted + y.numel()
            n += b
        self.model.train(was)
        out = {"loss": total / max(n, 1), "n": n}
        if counted:
            out["accuracy"] = correct / counted
        return out

    # ------------------------------------------------------------------ the loop

    def steps(self, epochs: int):
        """Train until `epochs` epochs are done, yielding {"kind": "step", "step", "epoch", "batch",
        "batches", "loss", "accuracy", "lr"} after each step and {"kind": "epoch", **epoch metrics} after
        each epoch (validation included). Continues from wherever the trainer stands (a resumed state)."""
        if self._t0 is None:
            self._t0 = time.perf_counter()
        while self.epoch < epochs:
            self.loader.set_epoch(self.epoch)
            self.model.train()
            batches = len(self.loader)
            for batch in self.loader.iter_from(self.batch):
                loss, correct, n = self.train_step(batch)
                self.step, self.batch = self.step + 1, self.batch + 1
                s = self._sums
                s[0], s[3] = s[0] + loss * n, s[3] + n
                ev = {"kind": "step", "step": self.step, "epoch": self.epoch, "batch": self.batch,
                      "batches": batches, "loss": loss, "lr": self.optimizer.param_groups[0]["lr"]}
                if correct is not None:
                    counted = _split(batch)[1].numel()  # targets per sample: 1, or T for sequences
                    s[1], s[2] = s[1] + correct, s[2] + counted
                    ev["accuracy"] = correct / counted
                yield ev
            yield self._end_epoch()

    def _end_epoch(self) -> dict:
        s = self._sums
        rec = {"kind": "epoch", "epoch": self.epoch, "step": self.step, "loss": s[0] / max(s[3], 1)}
        if s[2]:
            rec["accuracy"] = s[1] / s[2]
        if self.val_loader is not None:
            v = self.evaluate(self.val_loader)
            rec.update({f"val_{k}": x for k, x in v.items() if k != "n"})
        rec["seconds"] = round(time.perf_counter() - self._t0, 3)
        if self.scheduler is not None and self.scheduler_per == "epoch":
            self.scheduler.step()
        self.history.append({k: v for k, v in rec.items() if k != "kind"})
        self.epoch, self.batch, self._sums = self.epoch + 1, 0, [0.0, 0, 0, 0]
        return rec

    def fit(self, epochs: int, progress: bool = True, on_step=None, on_epoch=None) -> list[dict]:
        """Run `steps(epochs)` with a progress bar per epoch (tqdm when installed) and one summary line per
        epoch; -> the history, one dict per epoch."""
        from .progress import progress_bar
        bar = None
        for ev in self.steps(epochs):
            if ev["kind"] == "step":
                if bar is None:
                    bar = progress_bar(ev["batches"], f"epoch {ev['epoch'] + 1}/{epochs}", progress)
                    bar.update(ev["batch"] - 1)
                bar.update(1)
                bar.set_postfix(loss=ev["loss"], **({"acc": ev["accuracy"]} if "accuracy" in ev else {}))
                if on_step is not None:
                    on_step(ev)
            else:
                if bar is not None:
                    bar.close()
                    bar = None
                if progress:
                    print(format_epoch(ev), flush=True)
                if on_epoch is not None:
                    on_epoch(ev)
        return self.history

    # ------------------------------------------------------------------ state for checkpoints

    def state_dict(self) -> dict:
        """Counters, running sums and history (plain values); the tensors live in model and optimizer."""
        return {"step": self.step, "epoch": self.epoch, "batch": self.batch, "sums": list(self._sums),
                "history": list(self.history)}

    def load_state_dict(self, s: dict) -> None:
        self.step, self.epoch, self.batch = int(s["step"]), int(s["epoch"]), int(s["batch"])
        self._sums, self.history = list(s["sums"]), list(s["history"])


def format_epoch(ev: dict) -> str:
    parts = [f"epoch {ev['epoch'] + 1}", f"loss {ev['loss']:.4f}"]
    for k in ("accuracy", "val_loss", "val_accuracy"):
        if k in ev:
            parts.append(f"{k.replace('_', ' ')} {ev[k]:.4f}")
    parts.append(f"{ev['seconds']:.1f} s")
    return "  ".join(parts)


def fit(model, train_loader, optimizer, epochs: int = 1, loss_fn=classification_loss, val_loader=None,
        scheduler=None, progress: bool = True, **kwargs) -> list[dict]:
    """Train `model` for `epochs` epochs; -> one dict per epoch: loss, accuracy, val_loss, val_accuracy,
    seconds. kwargs: scheduler_per, clip_grad_norm, mixed_precision, on_step, on_epoch."""
    hooks = {k: kwargs.pop(k) for k in ("on_step", "on_epoch") if k in kwargs}
    t = Trainer(model, optimizer, train_loader, loss_fn, val_loader, scheduler, **kwargs)
    return t.fit(epochs, progress, **hooks)
