"""A quantized weight larger than qtensor.PART_BYTES multiplies on a device as slices of whole rows, uploaded
once (WebGPU binds at most 128 MiB per buffer; Gemma 3 270M's tied Q8_0 table is 178 MB): the product equals
the host's, and the slices are reused from call to call. PART_BYTES is shrunk here so a small weight splits."""
import numpy as np
import pytest

import ember
from ember import qtensor
from ember.quant import QTensor


@pytest.mark.parametrize("qtype", ["q8_0", "q4_k"])
def test_row_slices_on_a_device_give_the_host_product(device, qtype, monkeypatch):
    if device == "cpu":
        pytest.skip("cpu is the reference here")
    rng = np.random.default_rng(0)
    q = QTensor.quantize(rng.standard_normal((50, 256)).astype(np.float32), qtype)
    monkeypatch.setattr(qtensor, "PART_BYTES", 7 * q.data.shape[1] + 3)  # 7 whole rows a slice
    x = rng.standard_normal((2, 3, 256)).astype(np.float32)
    want = q.matmul_t(x)                                                     # host: (2, 3, 50)
    parts = q.device_parts()
    assert [p.shape[0] for p in parts] == [7] * 7 + [1] and parts[0].data.base is not None  # views, no copy
    got = q.matmul_t(ember.tensor(x, device=device))
    assert str(got.device) == device and tuple(got.shape) == (2, 3, 50)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-4)
    assert q.device_parts() is parts
