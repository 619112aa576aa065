"""The cuda device without CuPy or without a GPU: a clear ember.DeviceError, never listed by
ember.devices(); the module API (device_count, synchronize, memory_stats, allow_tf32) degrades
quietly. CuPy's absence and a failing driver query are both simulated, so this runs anywhere."""
from __future__ import annotations

import subprocess
import sys

import pytest

import ember
from ember.backends import cuda_backend as C


class _NoDriver:
    """Stands in for the cupy module on a machine whose driver query fails."""

    class cuda:
        class runtime:
            @staticmethod
            def getDeviceCount():
                raise RuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected")


class _OneGpu:
    class cuda:
        class runtime:
            @staticmethod
            def getDeviceCount():
                return 1


def test_missing_cupy_gives_install_hint(monkeypatch):
    monkeypatch.setattr(C, "cupy", None)
    monkeypatch.setattr(C, "_CUPY_ERROR", ImportError("No module named 'cupy'"))
    with pytest.raises(ember.DeviceError) as e:
        C.CudaBackend(0)
    msg = str(e.value)
    assert msg.startswith("ember: device 'cuda' is not available: CuPy is not installed")
    assert "install ember[cuda] (pip install cupy-cuda12x)" in msg
    assert C.device_count() == 0 and not C.is_available()
    assert C.memory_stats() == {"used_bytes": 0, "pool_bytes": 0}
    C.empty_cache()  # no-op without CuPy


def test_no_gpu_gives_clear_error(monkeypatch):
    monkeypatch.setattr(C, "cupy", _NoDriver)
    with pytest.raises(ember.DeviceError, match=r"^ember: device 'cuda:1' is not available: no CUDA GPU found "
                                                r"\(cudaErrorNoDevice"):
        C.CudaBackend(1)
    assert C.device_count() == 0


def test_index_past_the_last_gpu(monkeypatch):
    monkeypatch.setattr(C, "cupy", _OneGpu)
    with pytest.raises(ember.DeviceError, match=r"'cuda:3' is not available: this machine has 1 CUDA GPU\(s\) "
                                                r"\(cuda:0 .. cuda:0\)"):
        C.CudaBackend(3)


@pytest.mark.skipif(C.is_available(), reason="a CUDA GPU is present: the no-GPU behaviour cannot be observed")
def test_cuda_tensor_without_gpu_raises_and_is_not_listed():
    with pytest.raises(ember.DeviceError, match=r"ember: device 'cuda' is not available: (CuPy is not installed|no CUDA GPU)"):
        ember.zeros(2, device="cuda")
    with pytest.raises(ember.DeviceError, match="not available"):
        ember.ones(2).to("cuda:1")
    assert "cuda" not in ember.devices()
    with pytest.raises(ember.DeviceError):  # asking for a device's work to finish needs the device
        C.synchronize(0)
    C.synchronize()  # no cuda backend was ever made: nothing to wait for


def test_synchronize_rejects_other_devices():
    with pytest.raises(ember.DeviceError, match="got a cpu device"):
        C.synchronize("cpu")


def test_tf32_is_opt_in():
    assert C.allow_tf32 is False


def test_import_ember_does_not_import_cupy():
    code = "import sys, ember; ember.zeros(2); assert 'cupy' not in sys.modules and 'ember.backends.cuda_backend' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
