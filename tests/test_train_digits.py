"""The digits CNN: one training step (loss, every gradient, the AdamW update) equals torch's for the same
weights and batch; the example reaches >= 97 % test accuracy, and its checkpoint evaluates the same."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

import ember
from ember.models.digits import DigitsCNN, TrainConfig, digits_loaders, init_weights, make_trainer

torch = pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[1]


def need_digits():
    if importlib.util.find_spec("sklearn") is None:
        pytest.skip("scikit-learn is not installed (pip install scikit-learn): its digits file is the fixture")


class TorchCNN(torch.nn.Module):
    """DigitsCNN written in torch, layer for layer."""

    def __init__(self, c=16, hidden=64):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, c, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(c, 2 * c, 3, padding=1)
        self.fc1 = torch.nn.Linear(2 * c * 16, hidden)
        self.fc2 = torch.nn.Linear(hidden, 10)

    def forward(self, x):
        x = torch.relu(self.conv1(x))
        x = torch.nn.functional.max_pool2d(torch.relu(self.conv2(x)), 2)
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


def test_one_training_step_equals_torch():
    need_digits()
    cfg = TrainConfig()
    trainer = make_trainer(cfg)
    model = trainer.model
    ref = TorchCNN()
    ref.load_state_dict({k: torch.tensor(v.numpy()) for k, v in model.state_dict().items()})
    opt_t = torch.optim.AdamW(ref.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched_t = torch.optim.lr_scheduler.LambdaLR(opt_t, trainer.scheduler.lr_lambda)
    x, y = next(iter(trainer.loader))
    assert x.shape == (64, 1, 8, 8) and float(x.max().item()) <= 1.0
    loss_t = torch.nn.functional.cross_entropy(ref(torch.tensor(x.numpy())), torch.tensor(y.numpy()))
    loss_t.backward()
    out = model(x)
    loss = ember.nn.functional.cross_entropy(out, y)
    loss.backward()
    assert abs(loss.item() - loss_t.item()) < 1e-6
    for name, p in model.named_parameters():
        g = dict(ref.named_parameters())[name].grad.numpy()
        np.testing.assert_allclose(p.grad.numpy(), g, atol=1e-6 * max(1.0, np.abs(g).max()), rtol=1e-4, err_msg=name)
    model.zero_grad()
    trainer.train_step((x, y))                 # the Trainer's own step: forward, backward, AdamW, schedule
    opt_t.step()
    sched_t.step()
    for name, p in model.named_parameters():
        np.testing.assert_allclose(p.numpy(), dict(ref.named_parameters())[name].detach().numpy(), atol=1e-6,
                                   err_msg=name)
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(opt_t.param_groups[0]["lr"])


def test_init_is_torch_default_scale_and_platform_stable():
    m = DigitsCNN()
    init_weights(m, 5)
    w = m.conv2.weight.numpy()
    bound = 1 / np.sqrt(16 * 9)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.95 * bound
    rs = np.random.RandomState(5)       # the frozen legacy stream: the first parameter is its first draws
    np.testing.assert_array_equal(m.conv1.weight.numpy(), rs.uniform(-1 / 3, 1 / 3, (16, 1, 3, 3)).astype(np.float32))


def test_split_is_fixed_and_disjoint():
    need_digits()
    train, test = digits_loaders(TrainConfig())
    a = train.dataset.indices
    b = test.dataset.indices
    assert len(a) == 1437 and len(b) == 360 and not set(a) & set(b)
    assert digits_loaders(TrainConfig())[1].dataset.indices == b


def test_example_reaches_97_percent_and_its_checkpoint_reloads(tmp_path):
    need_digits()
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import train_digits_cnn
    finally:
        sys.path.pop(0)
    ck = tmp_path / "digits.safetensors"
    acc = train_digits_cnn.main(["--no-progress", "--checkpoint", str(ck)])
    assert acc >= 0.97, acc
    fresh = make_trainer(TrainConfig())
    init_weights(fresh.model, 1)                 # other weights: the checkpoint must bring them all
    from ember.train import load_checkpoint
    meta = load_checkpoint(ck, trainer=fresh)
    assert meta["step"] == 4 * len(fresh.loader) == 4 * 23
    assert fresh.evaluate(fresh.val_loader)["accuracy"] == pytest.approx(acc)


def test_training_steps_agree_on_every_device(device):
    """Two Trainer steps (batch 8) on `device` give the CPU's losses and weights: training code never names
    a backend, so the page's WebGPU choice trains the same model."""
    need_digits()
    runs = {}
    for dev in ("cpu", device):
        t = make_trainer(TrainConfig(batch_size=8, device=dev))
        batch = next(iter(t.loader))
        runs[dev] = ([t.train_step(batch)[0] for _ in range(2)], t.model.fc1.weight.numpy())
    np.testing.assert_allclose(runs[device][0], runs["cpu"][0], rtol=1e-5)
    np.testing.assert_allclose(runs[device][1], runs["cpu"][1], atol=1e-5)
