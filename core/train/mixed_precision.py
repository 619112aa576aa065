"""Mixed precision: the model computes in bfloat16 or float16 while the optimizer updates float32 master
copies of its weights, so small updates are not rounded away (bf16 keeps 8 bits of mantissa: a weight
near 1 ignores any step under 2**-8). float16 also scales the loss so small gradients do not underflow,
lowering the scale when a step overflows and raising it after `growth_interval` clean steps (torch's
GradScaler rule).

    mp = MixedPrecision(model, "bfloat16")
    opt = ember.optim.AdamW(mp.parameters(), lr=1e-3)          # the master weights
    loss = F.cross_entropy(model(mp.cast(x)).float(), y)
    mp.backward(loss); mp.step(opt)                             # unscale, check, step, copy back
"""
from __future__ import annotations

import math

from ..autograd import no_grad
from ..nn.module import Parameter
from ..ops_movement import stack


class MixedPrecision:
    def __init__(self, model, dtype="bfloat16", loss_scale=None, growth_interval: int = 2000):
        from .. import dtypes
        self.model, self.dtype = model, dtypes.get(dtype)
        name = self.dtype.name
        if name not in ("bfloat16", "float16"):
            raise ValueError(f"ember: mixed precision computes in bfloat16 or float16, not {name}")
        self.params = [p for p in model.parameters() if p.dtype.is_float]
        with no_grad():
            self.master = [Parameter(p.detach().float().clone()) for p in self.params]
        model.to(name)
        self.name = name  # the compute dtype's name
        # float16 overflows at 65504 and underflows below 6e-8: scale; bfloat16 has float32's range
        self.scale = float(loss_scale if loss_scale is not None else (2.0 ** 16 if name == "float16" else 1.0))
        self.dynamic = loss_scale is None and name == "float16"
        self.growth_interval, self._clean = int(growth_interval), 0
        self.skipped = 0

    def parameters(self):
        """The float32 master weights: give these to the optimizer."""
        return list(self.master)

    def cast(self, x):
        """An input for the model (float tensors to the compute dtype)."""
        return x.to(self.name) if x.dtype.is_float else x

    def backward(self, loss):
        (loss * self.scale if self.scale != 1.0 else loss).backward()

    @no_grad()
    def step(self, optimizer, clip_grad_norm: float | None = None) -> bool:
        """Unscale the model's gradients into the master weights, step the optimizer unless a gradient is
        inf/nan (then the step is skipped and the scale halved), copy the masters back. -> stepped?"""
        finite = True
        for p, m in zip(self.params, self.master):
            g = None if p.grad is None else p.grad.float() * (1.0 / self.scale)
            m.grad = g
            p.grad = None
        grads = [m.grad for m in self.master if m.grad is not None]
        if grads:
            total = float(stack([g.abs().amax() for g in grads]).amax().item())
            finite = math.isfinite(total)
        if not finite:
            self.skipped += 1
            for m in self.master:
                m.grad = None
            if self.dynamic:
                self.scale, self._clean = max(self.scale / 2.0, 1.0), 0
            return False
        if clip_grad_norm is not None:
            from ..nn.utils import clip_grad_norm_
            clip_grad_norm_(self.master, clip_grad_norm)
        optimizer.step()
        for p, m in zip(self.params, self.master):
            p._data = m.detach().to(self.name)._data
            m.grad = None
        if self.dynamic:
            self._clean += 1
            if self._clean >= self.growth_interval:
                self.scale, self._clean = self.scale * 2.0, 0
        return True

    def state_dict(self) -> dict:
        return {"scale": self.scale, "clean": self._clean, "skipped": self.skipped}

    def load_state_dict(self, s: dict) -> None:
        self.scale, self._clean, self.skipped = float(s["scale"]), int(s["clean"]), int(s["skipped"])

    @no_grad()
    def sync_from_master(self) -> None:
        for p, m in zip(self.params, self.master):
            p._data = m.detach().to(self.name)._data
