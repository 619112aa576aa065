"""Loss modules and functions against torch: values and input gradients over reductions, class weights,
ignore_index, label smoothing, class-probability targets, N-d inputs, pos_weight, log_target, margins; the
`weight` / `pos_weight` buffers keep torch's state_dict names. On every device."""
import numpy as np
import pytest
import torch

import ember
import ember.nn as nn
from nn_parity import compare, load_torch

R = np.random.default_rng(0)
C = 4


def _f(*shape):
    return R.standard_normal(shape).astype(np.float32)


def _idx(*shape, ignore=False):
    t = R.integers(0, C, shape)
    if ignore:
        t.reshape(-1)[::3] = -100
    return t


W = np.array([0.5, 1.0, 2.0, 1.5], np.float32)
PROBS = np.random.default_rng(1).dirichlet(np.ones(C), 6).astype(np.float32)

# name: (module name, constructor kwargs (arrays become tensors), inputs)
CASES = {
    "ce_mean": ("CrossEntropyLoss", {}, [_f(6, C), _idx(6)]),
    "ce_weight_ignore": ("CrossEntropyLoss", dict(weight=W), [_f(6, C), _idx(6, ignore=True)]),
    "ce_smooth_weight": ("CrossEntropyLoss", dict(weight=W, label_smoothing=0.2), [_f(6, C), _idx(6, ignore=True)]),
    "ce_smooth_sum": ("CrossEntropyLoss", dict(label_smoothing=0.1, reduction="sum"), [_f(6, C), _idx(6)]),
    "ce_nd_none": ("CrossEntropyLoss", dict(reduction="none", weight=W), [_f(2, C, 3, 2), _idx(2, 3, 2)]),
    "ce_unbatched": ("CrossEntropyLoss", {}, [_f(C), np.array(2)]),
    "ce_probs": ("CrossEntropyLoss", dict(weight=W, label_smoothing=0.3), [_f(6, C), PROBS]),
    "nll_weight_ignore": ("NLLLoss", dict(weight=W), [_f(6, C), _idx(6, ignore=True)]),
    "nll_nd_sum": ("NLLLoss", dict(reduction="sum"), [_f(2, C, 5), _idx(2, 5)]),
    "mse": ("MSELoss", {}, [_f(3, 5), _f(3, 5)]),
    "mse_none": ("MSELoss", dict(reduction="none"), [_f(3, 5), _f(3, 5)]),
    "l1_sum": ("L1Loss", dict(reduction="sum"), [_f(3, 5), _f(3, 5)]),
    "smooth_l1": ("SmoothL1Loss", dict(beta=0.5), [_f(4, 5), _f(4, 5)]),
    "smooth_l1_beta0": ("SmoothL1Loss", dict(beta=0.0, reduction="sum"), [_f(4, 5), _f(4, 5)]),
    "huber": ("HuberLoss", dict(delta=0.7, reduction="none"), [_f(4, 5), _f(4, 5)]),
    "bce": ("BCELoss", dict(weight=W), [1 / (1 + np.exp(-_f(3, C))), R.random((3, C)).astype(np.float32)]),
    "bce_logits": ("BCEWithLogitsLoss", dict(pos_weight=W), [_f(3, C), R.random((3, C)).astype(np.float32)]),
    "bce_logits_weight": ("BCEWithLogitsLoss", dict(weight=W, reduction="sum"),
                          [_f(3, C), (R.random((3, C)) > 0.5).astype(np.float32)]),
    "kl_batchmean": ("KLDivLoss", dict(reduction="batchmean"),
                     [np.log(PROBS[::-1].copy()), np.where(PROBS > 0.2, PROBS, 0).astype(np.float32)]),
    "kl_log_target": ("KLDivLoss", dict(reduction="mean", log_target=True), [np.log(PROBS), np.log(PROBS[::-1].copy())]),
    "cosine": ("CosineEmbeddingLoss", dict(margin=0.2), [_f(5, 3), _f(5, 3), np.array([1, -1, 1, -1, -1])]),
    "cosine_1d_none": ("CosineEmbeddingLoss", dict(reduction="none"), [_f(3), _f(3), np.array(-1)]),
    "legacy_reduce": ("MSELoss", dict(size_average=False), [_f(3, 5), _f(3, 5)]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_loss_matches_torch(device, case):
    name, kw, inputs = CASES[case]
    make = lambda lib, conv: getattr(lib.nn, name)(**{k: conv(v) if isinstance(v, np.ndarray) else v  # noqa: E731
                                                     for k, v in kw.items()})
    tm = make(torch, torch.tensor)
    em = load_torch(make(ember, ember.tensor), tm, device)
    frozen = tuple(i for i, x in enumerate(inputs) if i == len(inputs) - 1 and name != "MSELoss")
    fwd, bwd = compare(em, tm, inputs, device, atol=1e-5, grad_atol=1e-5, frozen=frozen)
    assert fwd <= 1e-5 and bwd <= 1e-5


def test_bad_arguments():
    with pytest.raises(nn.LayerError, match="reduction"):
        nn.MSELoss(reduction="avg")
    with pytest.raises(nn.LayerError, match="reduction"):
        nn.CrossEntropyLoss(reduction="batchmean")
    with pytest.raises(nn.LayerError, match="label_smoothing"):
        nn.CrossEntropyLoss(label_smoothing=1.5)
    with pytest.raises(nn.LayerError, match="delta"):
        nn.HuberLoss(delta=0)
