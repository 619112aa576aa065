"""ember.nn integration: QLinear, ember.quantize(model, type), GGUF save/load of a quantized model.

Reference: torch.nn.functional.linear with the weight dequantized by gguf-py from the same bytes.
"""
from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import nn
from ember.io import gguf as eg
from ember.quant import QLinear, QTensor, load_quantized, quantized_state_dict

torch = pytest.importorskip("torch")
gguf = pytest.importorskip("gguf")


def _mlp():
    ember.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 96), nn.GELU(), nn.Linear(96, 40), nn.Linear(40, 8))


def _ref_weight(q: QTensor):
    return torch.from_numpy(gguf.quants.dequantize(q.data, gguf.GGMLQuantizationType[q.ggml_type.name]).copy())


@pytest.mark.parametrize("qtype", ["q4_0", "q8_0", "q5_1"])
def test_quantize_model_matches_torch(qtype, device, rng):
    model = _mlp()
    ember.quantize(model, qtype).to(device)  # QTensors stay on the CPU; biases and float layers move
    kinds = [type(m).__name__ for m in model]
    assert kinds == ["QLinear", "GELU", "QLinear", "Linear"]  # 40 inputs: not a multiple of 32, stays float
    x = rng.standard_normal((5, 64)).astype(np.float32)
    y = model(ember.tensor(x, device=device))
    assert str(y.device) == device
    with torch.no_grad():
        h = torch.nn.functional.linear(torch.from_numpy(x), _ref_weight(model[0].weight),
                                       torch.from_numpy(model[0].bias.numpy()))
        h = torch.nn.functional.gelu(h)
        h = torch.nn.functional.linear(h, _ref_weight(model[2].weight), torch.from_numpy(model[2].bias.numpy()))
        ref = torch.nn.functional.linear(h, torch.from_numpy(model[3].weight.numpy()),
                                         torch.from_numpy(model[3].bias.numpy()))
    np.testing.assert_allclose(y.numpy(), ref.numpy(), rtol=1e-5, atol=1e-5)


def test_quantize_include_filter_and_k_types():
    model = nn.Sequential(nn.Linear(256, 16), nn.Linear(16, 512), nn.Linear(512, 4))
    ember.quantize(model, "q4_k", include=lambda name, lin: name != "2")
    assert [type(m).__name__ for m in model] == ["QLinear", "Linear", "Linear"]
    assert model[0].weight.ggml_type == "Q4_K"
    with pytest.raises(ValueError, match="unknown GGML type 'q7'"):
        ember.quantize(model, "q7")


def test_qlinear_gradient_flows_to_input(rng):
    lin = nn.Linear(64, 32)
    q = QLinear.from_linear(lin, "q8_0")
    x = ember.tensor(rng.standard_normal((3, 64)).astype(np.float32), requires_grad=True)
    (q(x) * ember.tensor(np.arange(32, dtype=np.float32))).sum().backward()
    xt = torch.from_numpy(x.numpy()).requires_grad_(True)
    yt = torch.nn.functional.linear(xt, _ref_weight(q.weight), torch.from_numpy(lin.bias.numpy()))
    (yt * torch.arange(32, dtype=torch.float32)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_quantized_model_round_trips_through_gguf(tmp_path, rng):
    model = ember.quantize(_mlp(), "q8_0")
    path = tmp_path / "mlp.gguf"
    eg.save(quantized_state_dict(model), path, metadata={"general.architecture": "mlp"})
    x = ember.tensor(rng.standard_normal((2, 64)).astype(np.float32))
    fresh = _mlp()
    missing, unexpected = load_quantized(fresh, path)  # straight from the file
    assert missing == [] and unexpected == []
    assert [type(m).__name__ for m in fresh] == ["QLinear", "GELU", "QLinear", "Linear"]
    assert np.array_equal(fresh[0].weight.data, model[0].weight.data)
    np.testing.assert_array_equal(fresh(x).numpy(), model(x).numpy())
    # a quantized embedding (not a Linear weight) is dequantized into the float parameter
    emb = nn.Embedding(10, 32)
    q = QTensor.quantize(rng.standard_normal((10, 32)).astype(np.float32), "q8_0")
    load_quantized(emb, {"weight": q})
    assert np.array_equal(emb.weight.numpy(), q.numpy())
    with pytest.raises(ValueError, match=r"0.weight: quantized weight of shape \(8, 64\) does not fit"):
        load_quantized(_mlp(), {"0.weight": QTensor.quantize(np.ones((8, 64), np.float32), "q8_0")})
    with pytest.raises(nn.StateDictError, match="missing keys"):
        load_quantized(_mlp(), {"0.weight": model[0].weight})
