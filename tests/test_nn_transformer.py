"""nn.Transformer* against torch: torch's weights loaded strictly, outputs and gradients (inputs and every
parameter) for post-norm and pre-norm, relu / gelu / callable activations, masks and padding, on every device;
and a small Transformer encoder classifier trained 20 steps with ember's Adam on torch's loss curve."""
import numpy as np
import pytest
import torch

import ember
import ember.nn as nn
import ember.nn.functional as F
from nn_parity import compare, load_torch

D, H, FF, T, S, N = 16, 4, 24, 5, 6, 2


def _act(lib, name):
    if name == "callable":
        return (lambda x: lib.nn.functional.silu(x)) if lib is torch else F.silu
    return name


def _masks(rng, L, Sk, kind):
    am = kpm = None
    if kind in ("causal", "both"):
        am = np.triu(np.ones((L, Sk), bool), 1)
    if kind == "float":
        am = rng.standard_normal((L, Sk)).astype(np.float32)
    if kind in ("padding", "both"):
        kpm = np.zeros((N, Sk), bool)
        kpm[1, -2:] = True
    return am, kpm


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu", "callable"])
@pytest.mark.parametrize("masks", ["none", "causal", "float", "both"])
def test_encoder_layer_matches_torch(device, norm_first, activation, masks):
    kw = dict(dim_feedforward=FF, dropout=0.0, norm_first=norm_first, batch_first=True)
    torch.manual_seed(0)
    tm = torch.nn.TransformerEncoderLayer(D, H, activation=_act(torch, activation), **kw)
    em = load_torch(nn.TransformerEncoderLayer(D, H, activation=_act(ember, activation), **kw), tm, device)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, T, D)).astype(np.float32)
    am, kpm = _masks(rng, T, T, masks)
    compare(em, tm, [x, am, kpm], device,
            lambda m, x, am, kpm: m(x, src_mask=am, src_key_padding_mask=kpm, is_causal=masks == "causal"))


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("masks", ["none", "causal", "both"])
def test_decoder_layer_matches_torch(device, norm_first, masks):
    kw = dict(dim_feedforward=FF, dropout=0.0, norm_first=norm_first, activation="gelu")
    torch.manual_seed(1)
    tm = torch.nn.TransformerDecoderLayer(D, H, **kw)
    em = load_torch(nn.TransformerDecoderLayer(D, H, **kw), tm, device)
    rng = np.random.default_rng(1)
    tgt = rng.standard_normal((T, N, D)).astype(np.float32)
    mem = rng.standard_normal((S, N, D)).astype(np.float32)
    tm_mask, tkpm = _masks(rng, T, T, masks)
    _, mkpm = _masks(rng, T, S, "padding" if masks == "both" else "none")
    compare(em, tm, [tgt, mem, tm_mask, tkpm, mkpm], device,
            lambda m, t, mem, am, tk, mk: m(t, mem, tgt_mask=am, tgt_key_padding_mask=tk,
                                            memory_key_padding_mask=mk))


@pytest.mark.parametrize("batch_first", [False, True])
def test_transformer_matches_torch(device, batch_first):
    kw = dict(d_model=D, nhead=H, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=FF, dropout=0.0,
              batch_first=batch_first)
    torch.manual_seed(2)
    tm = torch.nn.Transformer(**kw)
    em = load_torch(nn.Transformer(**kw), tm, device)
    rng = np.random.default_rng(2)
    src = rng.standard_normal((N, S, D) if batch_first else (S, N, D)).astype(np.float32)
    tgt = rng.standard_normal((N, T, D) if batch_first else (T, N, D)).astype(np.float32)
    causal = torch.nn.Transformer.generate_square_subsequent_mask(T).numpy()
    np.testing.assert_array_equal(nn.Transformer.generate_square_subsequent_mask(T).numpy(), causal)
    _, skpm = _masks(rng, S, S, "padding")
    compare(em, tm, [src, tgt, causal, skpm], device,
            lambda m, s, t, am, kpm: m(s, t, tgt_mask=am, src_key_padding_mask=kpm, memory_key_padding_mask=kpm),
            atol=2e-5, grad_atol=2e-4, frozen=(2,))  # torch reads the causal mask as a hint: no gradient


def test_encoder_stack_layers_are_independent():
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(D, H, FF), 3, norm=nn.LayerNorm(D))
    tenc = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(D, H, FF), 3, norm=torch.nn.LayerNorm(D),
                                       enable_nested_tensor=False)
    assert list(enc.state_dict()) == list(tenc.state_dict())
    assert enc.layers[0].linear1.weight is not enc.layers[1].linear1.weight


@pytest.mark.parametrize("bad", [dict(activation="swish"), dict(nhead=3), dict(nhead=0)])
def test_bad_arguments(bad):
    args = dict(d_model=D, nhead=H) | bad
    with pytest.raises(nn.LayerError, match="activation|num_heads|embed_dim"):
        nn.TransformerEncoderLayer(**args)


def test_encoder_trains_like_torch(device):
    """A 2-layer encoder classifier: same init, data and order, 20 Adam steps; losses within 1e-4."""
    class Clf:
        def __init__(self, lib):
            self.enc = lib.nn.TransformerEncoder(lib.nn.TransformerEncoderLayer(D, H, FF, dropout=0.0,
                                                                                  batch_first=True), 2)
            self.head = lib.nn.Linear(D, 3)
    torch.manual_seed(3)
    tm = Clf(torch)
    tm.enc.enable_nested_tensor = False
    em = Clf(ember)
    load_torch(em.enc, tm.enc, device)
    load_torch(em.head, tm.head, device)
    rng = np.random.default_rng(3)
    xs = rng.standard_normal((20, 4, T, D)).astype(np.float32)
    ys = rng.integers(0, 3, (20, 4))
    topt = torch.optim.Adam(list(tm.enc.parameters()) + list(tm.head.parameters()), lr=1e-2)
    eopt = ember.optim.Adam(list(em.enc.parameters()) + list(em.head.parameters()), lr=1e-2)
    tl, el = [], []
    for x, y in zip(xs, ys):
        topt.zero_grad()
        loss = torch.nn.functional.cross_entropy(tm.head(tm.enc(torch.tensor(x)).mean(1)), torch.tensor(y))
        loss.backward()
        topt.step()
        tl.append(loss.item())
        eopt.zero_grad()
        loss = F.cross_entropy(em.head(em.enc(ember.tensor(x, device=device)).mean(1)), ember.tensor(y, device=device))
        loss.backward()
        eopt.step()
        el.append(loss.item())
    np.testing.assert_allclose(el, tl, atol=1e-4)
    assert tl[-1] < tl[0]
