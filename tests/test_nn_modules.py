"""nn.Module, layers, init and optimizers against torch; a real training run."""
import math
import os
import sys

import numpy as np
import pytest
import torch

import ember
import ember.nn as nn


def _load_from_torch(em, tm):
    em.load_state_dict({k: ember.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})


LAYERS = [
    (lambda m: m.nn.Linear(5, 3), (2, 5)),
    (lambda m: m.nn.Conv2d(3, 4, 3, padding=1, stride=2), (2, 3, 6, 6)),
    (lambda m: m.nn.Conv1d(4, 6, 3, groups=2), (2, 4, 9)),
    (lambda m: m.nn.ConvTranspose2d(3, 2, 2, stride=2), (1, 3, 4, 4)),
    (lambda m: m.nn.LayerNorm(6), (2, 3, 6)),
    (lambda m: m.nn.RMSNorm(6, eps=1e-6), (2, 6)),
    (lambda m: m.nn.GroupNorm(2, 4), (2, 4, 3, 3)),
    (lambda m: m.nn.Sequential(m.nn.Linear(4, 8), m.nn.GELU(), m.nn.Dropout(0.0), m.nn.Linear(8, 2)), (3, 4)),
    (lambda m: m.nn.Sequential(m.nn.Conv2d(2, 4, 3), m.nn.BatchNorm2d(4), m.nn.SiLU(), m.nn.MaxPool2d(2),
                               m.nn.Upsample(scale_factor=2), m.nn.AdaptiveAvgPool2d(1), m.nn.Flatten()), (2, 2, 8, 8)),
]


@pytest.mark.parametrize("i", range(len(LAYERS)))
def test_layers_match_torch(device, i):
    make, shape = LAYERS[i]
    torch.manual_seed(0)
    tm = make(torch)
    em = make(ember)
    assert list(em.state_dict()) == list(tm.state_dict()), "parameter/buffer names differ from torch"
    for (k, a), (_, b) in zip(em.state_dict().items(), tm.state_dict().items()):
        assert tuple(a.shape) == tuple(b.shape), k
    _load_from_torch(em, tm)
    em.to(device)
    tm.eval(), em.eval()
    x = np.random.default_rng(i).standard_normal(shape).astype(np.float32)
    tx = torch.tensor(x, requires_grad=True)
    ex = ember.tensor(x, device=device, requires_grad=True)
    ty, ey = tm(tx), em(ex)
    np.testing.assert_allclose(ey.numpy(), ty.detach().numpy(), atol=1e-5, rtol=1e-5)
    ty.sum().backward()
    ey.sum().backward()
    np.testing.assert_allclose(ex.grad.numpy(), tx.grad.numpy(), atol=1e-4, rtol=1e-4)
    for (k, p), (_, tp) in zip(em.named_parameters(), tm.named_parameters()):
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), atol=1e-4, rtol=1e-4, err_msg=k)


def test_batchnorm_train_updates_running_stats():
    torch.manual_seed(0)
    tm, em = torch.nn.BatchNorm2d(3), nn.BatchNorm2d(3)
    x = np.random.default_rng(0).standard_normal((4, 3, 5, 5)).astype(np.float32)
    for _ in range(3):
        ty, ey = tm(torch.tensor(x)), em(ember.tensor(x))
    np.testing.assert_allclose(ey.numpy(), ty.detach().numpy(), atol=1e-5)
    for k in ("running_mean", "running_var", "num_batches_tracked"):
        np.testing.assert_allclose(em.state_dict()[k].numpy(), tm.state_dict()[k].numpy(), atol=1e-6, err_msg=k)


def test_default_init_distribution():
    ember.manual_seed(0)
    lin = nn.Linear(400, 300)
    w = lin.weight.numpy()
    bound = 1 / math.sqrt(400)  # kaiming_uniform(a=sqrt(5)) as torch: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    assert w.min() >= -bound and w.max() <= bound and abs(w.std() - bound / math.sqrt(3)) < 0.002
    emb = nn.Embedding(1000, 64).weight.numpy()
    assert abs(emb.std() - 1) < 0.02


def test_strict_loading_reports_everything():
    m = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4))
    sd = {k: v.detach() for k, v in m.state_dict().items()}
    sd["0.weight"] = ember.zeros(5, 3)
    del sd["1.bias"]
    sd["2.weight"] = ember.zeros(1)
    with pytest.raises(nn.StateDictError) as e:
        m.load_state_dict(sd)
    msg = str(e.value)
    assert "missing keys (1): 1.bias" in msg and "unexpected keys (1): 2.weight" in msg
    assert "shape mismatch for 0.weight: checkpoint (5, 3), model (4, 3)" in msg
    del sd["2.weight"]
    sd["0.weight"] = ember.ones(4, 3, dtype=ember.float16)
    missing, unexpected = m.load_state_dict(sd, strict=False)
    assert missing == ["1.bias"] and unexpected == []
    assert m[0].weight.dtype is ember.float32 and float(m[0].weight.sum()) == 12.0  # cast into the param dtype


def test_loaded_linear_weights_keep_values_in_backend_layout(device, tmp_path):
    """After loading, Linear weights may be re-stored (cpu: input-major, so x @ w.T reads contiguous rows);
    values, forward results, gradients, state_dict and saved files must not change."""
    rng = np.random.default_rng(0)
    sd = {"weight": rng.standard_normal((200, 96)).astype(np.float32), "bias": rng.standard_normal(200).astype(np.float32)}
    m = nn.Linear(96, 200, device=device)
    m.load_state_dict(sd)
    if device == "cpu":
        assert m.weight._data.T.flags.c_contiguous  # the layout the numpy backend chose
    x = rng.standard_normal((3, 96)).astype(np.float32)
    ref = torch.nn.functional.linear(torch.tensor(x), torch.tensor(sd["weight"]), torch.tensor(sd["bias"]))
    xe = ember.tensor(x, device=device, requires_grad=True)
    y = m(xe)
    np.testing.assert_allclose(y.numpy(), ref.numpy(), rtol=1e-5, atol=1e-5)
    y.sum().backward()
    np.testing.assert_allclose(m.weight.grad.numpy(), np.broadcast_to(x.sum(0), (200, 96)), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(m.state_dict()["weight"].numpy(), sd["weight"])
    from ember.io import safetensors
    safetensors.save(m.state_dict(), tmp_path / "m.safetensors")
    np.testing.assert_array_equal(np.asarray(safetensors.load(tmp_path / "m.safetensors")["weight"]), sd["weight"])
    emb = nn.Embedding(500, 96, device=device)  # index_select on an input-major table (Llama's tied lm_head)
    emb.load_state_dict({"weight": rng.standard_normal((500, 96)).astype(np.float32)})
    nn.relayout_linear_weight(emb.weight)
    idx = np.array([[3, 499, 0]])
    np.testing.assert_array_equal(emb(ember.tensor(idx, device=device)).numpy(), emb.weight.numpy()[idx])


def test_module_api():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(2, 2)
            self.blocks = nn.ModuleList([nn.Linear(2, 2) for _ in range(2)])
            self.register_buffer("scale", ember.ones(2))
            self.register_buffer("tmp", ember.ones(1), persistent=False)

        def forward(self, x):
            for b in self.blocks:
                x = b(x)
            return self.a(x) * self.scale

    n = Net()
    # torch's order: own parameters, own persistent buffers, then children in registration order
    assert list(n.state_dict()) == ["scale", "a.weight", "a.bias", "blocks.0.weight", "blocks.0.bias",
                                    "blocks.1.weight", "blocks.1.bias"]
    assert len(list(n.parameters())) == 6 and n.num_parameters() == 18
    n.half()
    assert n.a.weight.dtype is ember.float16 and n.scale.dtype is ember.float16
    n.float().eval()
    assert not n.training and not n.blocks[0].training
    y = n(ember.ones(3, 2))
    assert y.shape == (3, 2)


def _torch_opt(name, params, **kw):
    return getattr(torch.optim, name)(params, **kw)


@pytest.mark.parametrize("name,kw", [
    ("SGD", dict(lr=0.1)), ("SGD", dict(lr=0.1, momentum=0.9, weight_decay=0.01)),
    ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True, dampening=0.0)),
    ("Adam", dict(lr=0.01)), ("Adam", dict(lr=0.01, weight_decay=0.1, amsgrad=True)),
    ("AdamW", dict(lr=0.01)), ("AdamW", dict(lr=0.02, betas=(0.8, 0.9), weight_decay=0.3)),
], ids=str)
def test_optimizers_match_torch(name, kw):
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((4, 3)).astype(np.float32)
    tw = torch.tensor(w0, requires_grad=True)
    ew = nn.Parameter(ember.tensor(w0))
    topt, eopt = _torch_opt(name, [tw], **kw), getattr(ember.optim, name)([ew], **kw)
    for step in range(6):
        g = rng.standard_normal((4, 3)).astype(np.float32)
        tw.grad, ew.grad = torch.tensor(g), ember.tensor(g)
        topt.step(), eopt.step()
        np.testing.assert_allclose(ew.numpy(), tw.detach().numpy(), atol=1e-6, rtol=1e-5, err_msg=f"step {step}")


def test_cosine_schedule_matches_torch():
    tp = torch.nn.Parameter(torch.zeros(1))
    topt = torch.optim.SGD([tp], lr=0.5)
    eopt = ember.optim.SGD([nn.Parameter(ember.zeros(1))], lr=0.5)
    ts = torch.optim.lr_scheduler.CosineAnnealingLR(topt, T_max=10, eta_min=0.01)
    es = ember.optim.CosineAnnealingLR(eopt, T_max=10, eta_min=0.01)
    for _ in range(12):
        assert abs(ts.get_last_lr()[0] - es.get_last_lr()[0]) < 1e-9
        topt.step(), ts.step(), es.step()


def test_training_example_reaches_low_loss():
    """examples/train_mlp.py really trains: two-spirals cross-entropy falls below 0.05, accuracy > 97 %."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
    import train_mlp
    losses, acc = train_mlp.train(steps=250, log_every=0)
    assert losses[0] > 0.6 and losses[-1] < 0.05 and acc > 0.97, (losses[0], losses[-1], acc)
