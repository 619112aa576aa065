"""Shared by the tests/test_io_*.py files (no tests here): reference tensors built in torch, bit-exact comparison."""
import numpy as np
import pytest
import torch

# every dtype ember and the safetensors/torch formats share
TORCH_DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.int32,
                torch.uint8, torch.uint32, torch.int64, torch.bool]


def torch_tensors(seed=0):
    """One tensor per dtype with awkward values (NaN, inf, -0.0, extremes), plus a scalar and an empty one."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for i, dt in enumerate(TORCH_DTYPES):
        name = str(dt).replace("torch.", "")
        if dt.is_floating_point:
            t = torch.randn(3, 5, generator=g, dtype=torch.float64).to(dt)
            t[0, :3] = torch.tensor([float("nan"), float("inf"), -0.0], dtype=torch.float64).to(dt)
        elif dt == torch.bool:
            t = torch.rand(4, 2, generator=g) > 0.5
        else:
            info = torch.iinfo(dt)
            t = torch.tensor([info.min, info.max, 0, 1, 7, 100 % info.max], dtype=torch.int64).to(dt).reshape(2, 3)
        out[f"w.{i}.{name}"] = t
    out["scalar"] = torch.tensor(2.5)
    out["empty"] = torch.zeros(0, 4, dtype=torch.float16)
    return out


def storage_bits(t: torch.Tensor) -> np.ndarray:
    """torch tensor -> its numpy storage, bfloat16 as uint16 bits (ember's storage convention)."""
    t = t.detach().contiguous()
    return t.view(torch.uint16).numpy() if t.dtype == torch.bfloat16 else t.numpy()


def dtype_name(t: torch.Tensor) -> str:
    return str(t.dtype).replace("torch.", "")


def assert_same(e, t: torch.Tensor, name=""):
    """ember Tensor e equals torch tensor t bit for bit, with the same shape and dtype."""
    assert tuple(e.shape) == tuple(t.shape), name
    assert e.dtype.name == dtype_name(t), name
    a, b = e._storage_numpy(), storage_bits(t)
    assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), name


@pytest.mark.parametrize("ext", [".safetensors", ".gguf", ".npz", ".pt"])
def test_saving_over_a_lazily_loaded_file_keeps_the_loaded_tensors(tmp_path, ext):
    # a lazy load may memory-map the file: writing the new file in place would truncate the mapping
    # under the loaded tensors (SIGBUS on the next read); saving goes to a temporary name, then replaces
    import ember
    path = tmp_path / f"w{ext}"
    a = np.arange(1 << 16, dtype=np.float32).reshape(256, 256)
    ember.save({"a": ember.tensor(a), "b": ember.ones(3)}, path)
    loaded = ember.load(path)
    ember.save({"a": ember.zeros(2)}, path)  # over the same file, the old tensors still alive
    np.testing.assert_array_equal(np.asarray(loaded["a"]), a)
    assert ember.load(path)["a"].shape == (2,)
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no temporary left behind


def test_a_failed_save_leaves_the_old_file(tmp_path):
    import ember
    path = tmp_path / "w.safetensors"
    ember.save({"a": ember.ones(4)}, path)
    with pytest.raises(TypeError):
        ember.save({"a": ember.ones(4), 5: ember.ones(1)}, path)  # a bad name fails half-way
    np.testing.assert_array_equal(np.asarray(ember.load(path)["a"]), np.ones(4, np.float32))
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]
