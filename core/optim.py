"""ember.optim: SGD, Adam, AdamW with torch's defaults and update rules; LR schedules."""
from __future__ import annotations

import math

from .autograd import no_grad


class Optimizer:
    def __init__(self, params, defaults):
        params = list(params)
        if not params:
            raise ValueError("ember: optimizer got an empty parameter list")
        groups = params if isinstance(params[0], dict) else [{"params": params}]
        self.param_groups = []
        for g in groups:
            g = dict(g)
            g["params"] = list(g["params"])
            for k, v in defaults.items():
                g.setdefault(k, v)
            self.param_groups.append(g)
        self.defaults = defaults
        self.state = {}

    def zero_grad(self, set_to_none=True):
        for g in self.param_groups:
            for p in g["params"]:
                p.grad = None

    def _params(self):
        for g in self.param_groups:
            for p in g["params"]:
                if p.grad is not None:
                    yield g, p, p.grad

    def _indexed(self):
        """(index, param) over every group in order: the numbering torch's state_dict uses."""
        return enumerate(p for g in self.param_groups for p in g["params"])

    def state_dict(self):
        """{"state": {param index: {name: Tensor or number}}, "param_groups": [{hyper-parameters, "params":
        [indices]}]}, torch's layout: it refers to parameters by position, so it loads into a fresh
        optimizer built over the same parameters."""
        state = {i: dict(self.state[id(p)]) for i, p in self._indexed() if id(p) in self.state}
        groups, at = [], 0
        for g in self.param_groups:
            n = len(g["params"])
            groups.append({**{k: v for k, v in g.items() if k != "params"}, "params": list(range(at, at + n))})
            at += n
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict):
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups) or any(
                len(a["params"]) != len(b["params"]) for a, b in zip(groups, self.param_groups)):
            raise ValueError(f"ember: the optimizer state has groups of sizes {[len(g['params']) for g in groups]}, "
                             f"this optimizer {[len(g['params']) for g in self.param_groups]}")
        for mine, saved in zip(self.param_groups, groups):
            mine.update({k: (tuple(v) if isinstance(mine.get(k), tuple) else v) for k, v in saved.items() if k != "params"})
        params = dict(self._indexed())
        self.state = {}
        for i, st in state_dict["state"].items():
            p = params[int(i)]
            self.state[id(p)] = {k: (v.to(device=p.device) if hasattr(v, "shape") and hasattr(v, "to") else v)
                                 for k, v in st.items()}


class SGD(Optimizer):
    def __init__(self, params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, maximize=False):
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                                      nesterov=nesterov, maximize=maximize))

    @no_grad()
    def step(self):
        for g, p, d in self._params():
            if g["maximize"]:
                d = -d
            if g["weight_decay"]:
                d = d + p.detach() * g["weight_decay"]
            if g["momentum"]:
                st = self.state.setdefault(id(p), {})
                buf = st.get("momentum_buffer")
                buf = d if buf is None else buf * g["momentum"] + d * (1 - g["dampening"])
                st["momentum_buffer"] = buf
                d = d + buf * g["momentum"] if g["nesterov"] else buf
            p._data = (p.detach() - d * g["lr"])._data


class Adam(Optimizer):
    _decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=None, amsgrad=False, maximize=False):
        if weight_decay is None:
            weight_decay = 1e-2 if self._decoupled else 0.0
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                                      maximize=maximize))

    @no_grad()
    def step(self):
        for g, p, d in self._params():
            if g["maximize"]:
                d = -d
            b1, b2 = g["betas"]
            lr, wd = g["lr"], g["weight_decay"]
            w = p.detach()
            if wd:
                if self._decoupled:
                    w = w * (1 - lr * wd)
                else:
                    d = d + w * wd
            st = self.state.setdefault(id(p), {"step": 0, "exp_avg": d.zeros_like(), "exp_avg_sq": d.zeros_like()})
            st["step"] += 1
            t = st["step"]
            m = st["exp_avg"] = st["exp_avg"] * b1 + d * (1 - b1)
            v = st["exp_avg_sq"] = st["exp_avg_sq"] * b2 + d * d * (1 - b2)
            if g["amsgrad"]:
                vmax = st["max_exp_avg_sq"] = v if "max_exp_avg_sq" not in st else st["max_exp_avg_sq"].maximum(v)
                v = vmax
            bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
            denom = v.sqrt() * (1 / math.sqrt(bc2)) + g["eps"]
            p._data = (w - m / denom * (lr / bc1))._data


class AdamW(Adam):
    _decoupled = True


class LRScheduler:
    def __init__(self, optimizer, last_epoch=-1):
        self.optimizer = optimizer
        self.base_lrs = [g["lr"] for g in optimizer.param_groups]
        self.last_epoch = last_epoch
        self.step()

    def get_lr(self):
        raise NotImplementedError

    def step(self):
        self.last_epoch += 1
        for g, lr in zip(self.optimizer.param_groups, self.get_lr()):
            g["lr"] = lr

    def get_last_lr(self):
        return [g["lr"] for g in self.optimizer.param_groups]

    def state_dict(self):
        """Plain values only (a lambda schedule's function is code, rebuilt by whoever resumes)."""
        return {k: v for k, v in self.__dict__.items() if k != "optimizer" and not callable(v)}

    def load_state_dict(self, state_dict):
        self.__dict__.update(state_dict)
        for g, lr in zip(self.optimizer.param_groups, self.get_lr()):
            g["lr"] = lr


class StepLR(LRScheduler):
    """lr = base * gamma ** (epoch // step_size) (closed form of torch's StepLR)."""

    def __init__(self, optimizer, step_size, gamma=0.1, last_epoch=-1):
        self.step_size, self.gamma = int(step_size), gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        return [b * self.gamma ** (self.last_epoch // self.step_size) for b in self.base_lrs]


class MultiStepLR(LRScheduler):
    """lr = base * gamma ** (number of milestones <= epoch)."""

    def __init__(self, optimizer, milestones, gamma=0.1, last_epoch=-1):
        self.milestones, self.gamma = sorted(int(m) for m in milestones), gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        k = sum(1 for m in self.milestones if m <= self.last_epoch)
        return [b * self.gamma ** k for b in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    def __init__(self, optimizer, T_max, eta_min=0.0, last_epoch=-1):
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self):  # closed form (torch's recursive form agrees to rounding)
        t = self.last_epoch
        return [self.eta_min + (b - self.eta_min) * (1 + math.cos(math.pi * t / self.T_max)) / 2 for b in self.base_lrs]


class LambdaLR(LRScheduler):
    def __init__(self, optimizer, lr_lambda, last_epoch=-1):
        self.lr_lambda = lr_lambda
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        return [b * self.lr_lambda(self.last_epoch) for b in self.base_lrs]


def warmup_cosine(optimizer, warmup_steps, total_steps, min_ratio=0.0):
    """Linear warmup to the base lr, then cosine decay to min_ratio * base lr at total_steps."""
    def f(step):
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        p = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * p))
    return LambdaLR(optimizer, f)
