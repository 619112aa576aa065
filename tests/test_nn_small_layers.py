"""The smaller torch.nn layers (Conv3d, MaxPool1d, AvgPool1d, AdaptiveMaxPool2d, InstanceNorm1d/2d, PReLU,
PixelShuffle/Unshuffle, Unfold/Fold, EmbeddingBag, Bilinear) against torch: weights loaded strictly, outputs
and gradients (inputs and parameters), on every device."""
import numpy as np
import pytest
import torch

import ember
import ember.nn as nn
from nn_parity import compare, load_torch

R = np.random.default_rng(0)


def _f(*s):
    return R.standard_normal(s).astype(np.float32)


LAYERS = {
    "conv3d": (lambda m: m.nn.Conv3d(2, 4, (2, 3, 2), stride=(1, 2, 1), padding=1), [_f(2, 2, 4, 5, 4)]),
    "conv3d_groups": (lambda m: m.nn.Conv3d(4, 4, 3, groups=2, bias=False), [_f(1, 4, 4, 4, 4)]),
    "maxpool1d": (lambda m: m.nn.MaxPool1d(3, stride=2, padding=1), [_f(2, 3, 9)]),
    "maxpool1d_ceil": (lambda m: m.nn.MaxPool1d(2, ceil_mode=True), [_f(2, 3, 7)]),
    "avgpool1d": (lambda m: m.nn.AvgPool1d(3, stride=2, padding=1), [_f(2, 3, 9)]),
    "avgpool1d_nopad": (lambda m: m.nn.AvgPool1d(3, stride=2, padding=1, count_include_pad=False), [_f(2, 3, 8)]),
    "adaptive_max": (lambda m: m.nn.AdaptiveMaxPool2d((3, 2)), [_f(2, 3, 7, 5)]),
    "adaptive_max_even": (lambda m: m.nn.AdaptiveMaxPool2d(2), [_f(2, 3, 4, 6)]),
    "instnorm1d": (lambda m: m.nn.InstanceNorm1d(3), [_f(2, 3, 7)]),
    "instnorm2d_affine": (lambda m: m.nn.InstanceNorm2d(3, affine=True), [_f(2, 3, 4, 5)]),
    "instnorm2d_unbatched": (lambda m: m.nn.InstanceNorm2d(3, affine=True), [_f(3, 4, 5)]),
    "prelu": (lambda m: m.nn.PReLU(), [_f(2, 3, 4)]),
    "prelu_channels": (lambda m: m.nn.PReLU(3, init=0.1), [_f(2, 3, 4, 2)]),
    "pixel_shuffle": (lambda m: m.nn.PixelShuffle(2), [_f(2, 8, 3, 4)]),
    "pixel_unshuffle": (lambda m: m.nn.PixelUnshuffle(2), [_f(2, 2, 4, 6)]),
    "unfold": (lambda m: m.nn.Unfold((2, 3), dilation=(1, 2), padding=1, stride=(2, 1)), [_f(2, 3, 6, 7)]),
    "unfold_unbatched": (lambda m: m.nn.Unfold(2), [_f(3, 4, 4)]),
    "fold": (lambda m: m.nn.Fold((5, 6), (2, 3), dilation=(1, 2), padding=1, stride=(2, 1)), [_f(2, 12, 12)]),
    "fold_overlap": (lambda m: m.nn.Fold(4, 2), [_f(1, 8, 9)]),
    "bilinear": (lambda m: m.nn.Bilinear(3, 4, 5), [_f(2, 3), _f(2, 4)]),
    "bilinear_nd": (lambda m: m.nn.Bilinear(3, 4, 2, bias=False), [_f(2, 6, 3), _f(2, 6, 4)]),
}


@pytest.mark.parametrize("name", list(LAYERS))
def test_layer_matches_torch(device, name):
    make, inputs = LAYERS[name]
    torch.manual_seed(0)
    tm = make(torch)
    em = load_torch(make(ember), tm, device)
    compare(em, tm, inputs, device)


def test_fold_of_unfold_counts_overlaps(device):
    """fold(unfold(x)) = x times how many blocks cover each pixel (torch's identity), also through ember."""
    x = _f(1, 2, 5, 5)
    t = torch.nn.functional.fold(torch.nn.functional.unfold(torch.tensor(x), 3), 5, 3)
    e = nn.functional.fold(nn.functional.unfold(ember.tensor(x, device=device), 3), 5, 3)
    np.testing.assert_allclose(e.numpy(), t.numpy(), atol=1e-5)


def test_instance_norm_running_stats(device):
    torch.manual_seed(0)
    tm = torch.nn.InstanceNorm2d(3, track_running_stats=True, affine=True)
    em = load_torch(nn.InstanceNorm2d(3, track_running_stats=True, affine=True), tm, device)
    x = _f(4, 3, 5, 5)
    for _ in range(3):
        tm(torch.tensor(x))
        em(ember.tensor(x, device=device))
    for k, v in tm.state_dict().items():
        np.testing.assert_allclose(em.state_dict()[k].numpy(), v.numpy(), atol=1e-5, err_msg=k)
    tm.eval(), em.eval()
    compare(em, tm, [x], device)


@pytest.mark.parametrize("mode,layout", [(m, lay) for m in ("sum", "mean", "max")
                                         for lay in ("2d", "offsets", "last_offset", "padding_idx")]
                         + [("sum", "weights")])  # per_sample_weights only with sum (others refused, below)
def test_embedding_bag_matches_torch(device, mode, layout):
    kw = dict(mode=mode)
    if layout == "last_offset":
        kw["include_last_offset"] = True
    if layout == "padding_idx":
        kw["padding_idx"] = 2
    torch.manual_seed(0)
    tm = torch.nn.EmbeddingBag(10, 4, **kw)
    em = load_torch(nn.EmbeddingBag(10, 4, **kw), tm, device)
    idx = np.array([1, 2, 4, 5, 4, 3, 2, 9, 2])
    if layout == "2d":
        args = [idx.reshape(3, 3), None, None]
    elif layout == "last_offset":
        args = [idx, np.array([0, 2, 2, 5, 9]), None]                     # an empty bag in the middle
    elif layout == "weights":
        args = [idx, np.array([0, 4, 6]), R.random(9).astype(np.float32)]
    else:
        args = [idx, np.array([0, 4, 6]), None]
    compare(em, tm, args, device, lambda m, i, o, w: m(i, o, w))


def test_embedding_bag_bad_arguments():
    with pytest.raises(nn.LayerError, match="mode"):
        nn.EmbeddingBag(5, 2, mode="median")
    m = nn.EmbeddingBag(5, 2)
    with pytest.raises(nn.LayerError, match="per_sample_weights"):
        m(ember.tensor([1, 2]), ember.tensor([0]), ember.ones(2))
    with pytest.raises(nn.LayerError, match="offsets"):
        m(ember.tensor([1, 2]))
    with pytest.raises(nn.LayerError, match="offsets"):
        m(ember.tensor([1, 2]), ember.tensor([1]))
