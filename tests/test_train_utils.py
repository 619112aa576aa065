"""Training utilities against torch: gradient clipping, parameter vectors, LR schedules, optimizer state
round trips; mixed precision's master weights and loss scaling; the fit loop's history and progress."""
from __future__ import annotations

import io

import numpy as np
import pytest

import ember
import ember.nn as nn
import ember.nn.functional as F
from ember.data import DataLoader, TensorDataset
from ember.nn.utils import clip_grad_norm_, clip_grad_value_, parameters_to_vector, vector_to_parameters
from ember.train import MixedPrecision, Trainer, fit, load_checkpoint, save_checkpoint

torch = pytest.importorskip("torch")


def grads_pair(seed=0, scale=1.0):
    """The same three gradients on ember and torch parameters."""
    rng = np.random.default_rng(seed)
    shapes = [(4, 3), (3,), (2, 2, 2)]
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    grads = [(rng.standard_normal(s) * scale).astype(np.float32) for s in shapes]
    ours = [nn.Parameter(ember.tensor(a)) for a in arrays]
    ref = [torch.nn.Parameter(torch.tensor(a)) for a in arrays]
    for p, q, g in zip(ours, ref, grads):
        p.grad, q.grad = ember.tensor(g), torch.tensor(g)
    return ours, ref


@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf"), 3.0])
@pytest.mark.parametrize("max_norm", [0.5, 100.0])
def test_clip_grad_norm_matches_torch(norm_type, max_norm):
    ours, ref = grads_pair()
    total = clip_grad_norm_(ours, max_norm, norm_type)
    total_ref = torch.nn.utils.clip_grad_norm_(ref, max_norm, norm_type)
    np.testing.assert_allclose(total.item(), total_ref.item(), rtol=1e-6)
    for p, q in zip(ours, ref):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-6, atol=1e-7)


def test_clip_grad_norm_nonfinite_and_value():
    ours, ref = grads_pair()
    ours[0].grad = ours[0].grad * float("inf")
    with pytest.raises(RuntimeError, match="non-finite"):
        clip_grad_norm_(ours, 1.0, error_if_nonfinite=True)
    ours, ref = grads_pair(1, scale=3.0)
    clip_grad_value_(ours, 0.7)
    torch.nn.utils.clip_grad_value_(ref, 0.7)
    for p, q in zip(ours, ref):
        np.testing.assert_array_equal(p.grad.numpy(), q.grad.numpy())


def test_parameter_vectors_match_torch():
    ours, ref = grads_pair(2)
    v, vr = parameters_to_vector(ours), torch.nn.utils.parameters_to_vector(ref)
    np.testing.assert_array_equal(v.numpy(), vr.detach().numpy())
    new = np.arange(v.shape[0], dtype=np.float32)
    vector_to_parameters(ember.tensor(new), ours)
    torch.nn.utils.vector_to_parameters(torch.tensor(new), ref)
    for p, q in zip(ours, ref):
        np.testing.assert_array_equal(p.numpy(), q.detach().numpy())
    with pytest.raises(ValueError, match="hold 23 values"):
        vector_to_parameters(ember.zeros(5), ours)


@pytest.mark.parametrize("kind", ["step", "multistep", "cosine"])
def test_schedules_match_torch_and_resume(kind):
    p, q = nn.Parameter(ember.zeros(1)), torch.nn.Parameter(torch.zeros(1))
    opt, opt_t = ember.optim.SGD([p], lr=0.1), torch.optim.SGD([q], lr=0.1)
    make = {"step": (lambda o: ember.optim.StepLR(o, 3, 0.5), lambda o: torch.optim.lr_scheduler.StepLR(o, 3, 0.5)),
            "multistep": (lambda o: ember.optim.MultiStepLR(o, [2, 5], 0.1),
                          lambda o: torch.optim.lr_scheduler.MultiStepLR(o, [2, 5], 0.1)),
            "cosine": (lambda o: ember.optim.CosineAnnealingLR(o, 8, 0.01),
                       lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, 8, 0.01))}[kind]
    s, st = make[0](opt), make[1](opt_t)
    lrs, ref = [], []
    for _ in range(10):
        lrs.append(s.get_last_lr()[0])
        ref.append(st.get_last_lr()[0])
        opt_t.step()
        s.step()
        st.step()
    np.testing.assert_allclose(lrs, ref, rtol=1e-9)
    again = make[0](ember.optim.SGD([p], lr=0.1))
    again.load_state_dict(s.state_dict())
    assert again.get_last_lr() == s.get_last_lr()


def test_optimizer_state_round_trip_continues_identically():
    def run(split):
        ember.manual_seed(0)
        m = nn.Linear(5, 3)
        opt = ember.optim.AdamW(m.parameters(), lr=1e-2)
        x, y = ember.tensor(np.ones((4, 5), np.float32)), ember.tensor([0, 1, 2, 1])
        losses = []
        for step in range(6):
            if step == split:
                sd = opt.state_dict()
                opt = ember.optim.AdamW(m.parameters(), lr=1e-2)
                opt.load_state_dict(sd)
            loss = F.cross_entropy(m(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses
    assert run(None) == run(3)
    with pytest.raises(ValueError, match="groups of sizes"):
        ember.optim.SGD([nn.Parameter(ember.zeros(1))]).load_state_dict(
            ember.optim.SGD([nn.Parameter(ember.zeros(1)), nn.Parameter(ember.zeros(1))]).state_dict())


def test_bf16_master_weights_keep_updates_that_bf16_rounds_away():
    """lr * grad = 1e-4 on weights near 1: bf16 (8 mantissa bits, spacing 2**-7 at 1) drops each such
    update; the float32 masters add them up, exactly as torch's f32 SGD on the same gradients does."""
    def model():
        m = nn.Linear(4, 1, bias=False)
        m.weight.copy_(np.ones((1, 4), np.float32))
        return m
    x = ember.tensor(np.ones((2, 4), np.float32))
    plain = model().bfloat16()
    opt = ember.optim.SGD(plain.parameters(), lr=1e-4)
    mixed = model()
    mp = MixedPrecision(mixed, "bfloat16")
    opt_mp = ember.optim.SGD(mp.parameters(), lr=1e-4)
    ref = torch.ones(1, 4, requires_grad=True)
    opt_t = torch.optim.SGD([ref], lr=1e-4)
    for _ in range(20):
        loss = plain(x.bfloat16()).float().sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        mp.backward(mixed(mp.cast(x)).float().sum())
        assert mp.step(opt_mp)
        opt_t.zero_grad()
        # torch's reference: the bf16 forward's gradient (here exactly x summed: 2 per weight) in float32
        (torch.ones(2, 4) @ ref.T).sum().backward()
        opt_t.step()
    assert plain.weight.dtype == ember.bfloat16 and np.all(plain.weight.float().numpy() == 1.0)
    assert mp.master[0].dtype == ember.float32 and mixed.weight.dtype == ember.bfloat16
    np.testing.assert_allclose(mp.master[0].numpy(), ref.detach().numpy(), rtol=1e-6)
    assert mp.master[0].numpy()[0, 0] < 0.997                          # moved 20 x 2e-4


@pytest.mark.filterwarnings("ignore:overflow encountered", "ignore:invalid value encountered")
def test_f16_loss_scale_skips_overflowing_steps():
    m = nn.Linear(3, 1)
    mp = MixedPrecision(m, "float16")
    opt = ember.optim.SGD(mp.parameters(), lr=0.1)
    before = mp.master[0].numpy().copy()
    x = ember.tensor(np.full((2, 3), 1e4, np.float32))    # the scaled loss's gradient overflows float16
    mp.backward(m(mp.cast(x)).float().sum())
    assert mp.scale == 2.0 ** 16
    assert not mp.step(opt) and mp.scale == 2.0 ** 15 and mp.skipped == 1
    np.testing.assert_array_equal(mp.master[0].numpy(), before)
    mp.backward(m(mp.cast(ember.ones(1, 3))).float().sum())     # scaled gradient 2**15: fits float16
    assert mp.step(opt)
    # unscaled: the update is lr * the true gradient (1 per weight), not lr * scale * gradient
    np.testing.assert_allclose(mp.master[0].numpy(), before - 0.1, rtol=1e-3)


def blobs(n=96, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    x = (rng.standard_normal((n, 2)) * 0.3 + np.array([[0, 0], [2, 0], [0, 2]])[y]).astype(np.float32)
    return TensorDataset(x, y.astype(np.int64))


def make(seed=0, mp=None):
    ember.manual_seed(seed)
    m = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 3))
    mixed = MixedPrecision(m, mp) if mp else None
    opt = ember.optim.AdamW(mixed.parameters() if mixed else m.parameters(), lr=1e-2)
    sched = ember.optim.warmup_cosine(opt, 5, 30)
    loader = DataLoader(blobs(), batch_size=16, shuffle=True, seed=4)
    return Trainer(m, opt, loader, val_loader=DataLoader(blobs(48, 1), batch_size=48), scheduler=sched,
                   clip_grad_norm=1.0, mixed_precision=mixed)


@pytest.mark.parametrize("mp", [None, "bfloat16"])
def test_resume_mid_epoch_gives_the_uninterrupted_curve(tmp_path, mp):
    whole = make(mp=mp)
    curve = [ev["loss"] for ev in whole.steps(3) if ev["kind"] == "step"]
    first = make(mp=mp)
    part = []
    for ev in first.steps(3):
        if ev["kind"] == "step":
            part.append(ev["loss"])
            if len(part) == 8:                                   # epoch 1, batch 2 of 6
                break
    save_checkpoint(tmp_path / "ck.safetensors", trainer=first, extra={"note": "mid-epoch"})
    second = make(seed=123, mp=mp)                               # different initial weights: all restored
    meta = load_checkpoint(tmp_path / "ck.safetensors", trainer=second)
    assert meta["step"] == 8 and meta["extra"] == {"note": "mid-epoch"} and (second.epoch, second.batch) == (1, 2)
    part += [ev["loss"] for ev in second.steps(3) if ev["kind"] == "step"]
    assert part == curve
    untimed = [[{k: v for k, v in h.items() if k != "seconds"} for h in t.history] for t in (second, whole)]
    assert untimed[0] == untimed[1] and len(untimed[0]) == 3     # epoch metrics too (the running sums resumed)


def test_checkpoint_refuses_foreign_files(tmp_path):
    ember.save({"w": ember.zeros(2)}, tmp_path / "plain.safetensors")
    with pytest.raises(ember.FormatError, match="not an ember checkpoint"):
        load_checkpoint(tmp_path / "plain.safetensors", nn.Linear(1, 1))


def test_fit_reports_epochs_with_or_without_tqdm(monkeypatch, capsys):
    import builtins
    real_import = builtins.__import__

    def no_tqdm(name, *a, **k):
        if name.startswith("tqdm"):
            raise ImportError(name)
        return real_import(name, *a, **k)
    t = make()
    monkeypatch.setattr(builtins, "__import__", no_tqdm)
    steps = []
    history = fit(t.model, t.loader, t.optimizer, epochs=2, val_loader=t.val_loader, on_step=steps.append)
    monkeypatch.setattr(builtins, "__import__", real_import)
    out = capsys.readouterr()
    assert [h["epoch"] for h in history] == [0, 1] and history[1]["loss"] < history[0]["loss"]
    assert len(steps) == 12 and history[1]["loss"] == pytest.approx(np.mean([e["loss"] for e in steps[6:]]))
    assert 0 <= history[1]["val_accuracy"] <= 1
    assert "epoch 2  loss" in out.out and "val accuracy" in out.out
    assert "epoch 1/2: 100% 6/6" in out.err                      # the fallback bar, one line per tenth
    from ember.train import progress_bar
    bar = progress_bar(3, "x", file=io.StringIO())
    assert type(bar).__module__.startswith("tqdm")               # tqdm is what CI installs
