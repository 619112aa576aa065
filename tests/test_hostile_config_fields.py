"""config.json type and range holes, through every family loader: each hostile value is refused when the folder
is loaded, with ember's error naming the field, instead of a numpy error at the first forward or silent NaN
logits (before: a string or {} for rms_norm_eps, `true` for max_position_embeddings, NaN eps or rope_theta, a
llama3 rope_scaling factor of 0). Folders: tiny random-weight transformers models (tests/family_folders.py)."""
import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "fuzz"))
pytest.importorskip("torch")
pytest.importorskip("transformers")

import configs as C  # noqa: E402  (tests/fuzz/configs.py: the loader per family)
import family_folders  # noqa: E402

EPS_KEYS = ("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon")
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_source_positions")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return family_folders.build(tmp_path_factory.mktemp("families"))


def _config(folders, family) -> dict:
    return json.loads((Path(folders[family]) / "config.json").read_text())


def _load(folders, family, cfg):
    return C.load(family, folders[family], json.dumps(cfg).encode())


@pytest.mark.parametrize("family", sorted(C.LOADERS))
def test_each_family_loads_its_own_config_and_runs_finite(folders, family):
    C.load(family, folders[family], (Path(folders[family]) / "config.json").read_bytes())


def _edits(cfg):
    """(key path, value) edits for the fields this config has."""
    where = cfg.get("text_config") if "text_config" in cfg else cfg
    pre = ("text_config",) if "text_config" in cfg else ()
    out = []
    for k in EPS_KEYS:
        if k in where:
            out += [(pre + (k,), v) for v in ("1e-5x", {}, math.nan, -1.0, 0.0, [1e-5])]
    for k in CONTEXT_KEYS:
        if k in where:
            out += [(pre + (k,), v) for v in (True, 0, "64", 2.5)]
    if "rope_theta" in where:
        out += [(pre + ("rope_theta",), v) for v in (math.nan, 0, -1.0, math.inf, "1e4")]
    if isinstance(where.get("rope_parameters"), dict) and "rope_theta" in where["rope_parameters"]:
        out += [(pre + ("rope_parameters", "rope_theta"), v) for v in (math.nan, 0, -1.0, "1e4")]
    for k in ("hidden_size", "n_embd", "d_model", "dim", "num_attention_heads", "n_head"):
        if k in where:
            out += [(pre + (k,), v) for v in (True, 32.5, "32")]
    return out


@pytest.mark.parametrize("family", sorted(C.LOADERS))
def test_hostile_values_are_refused_at_load_naming_the_field(folders, family):
    from ember.errors import EmberError
    base = _config(folders, family)
    edits = _edits(base)
    assert edits, f"{family}: none of the checked fields is in its config"
    for path, value in edits:
        cfg = json.loads(json.dumps(base))
        node = cfg
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = value
        with pytest.raises(EmberError) as e:
            _load(folders, family, cfg)
        assert path[-1] in str(e.value) and str(e.value).startswith("ember: "), (family, path, value, str(e.value))


@pytest.mark.parametrize("edit", [
    {"factor": 0}, {"factor": math.nan}, {"factor": -8.0}, {"low_freq_factor": 4.0, "high_freq_factor": 4.0},
    {"high_freq_factor": None}, {"original_max_position_embeddings": 0}, {"factor": "8"},
])
def test_llama3_rope_scaling_holes_are_refused(folders, edit):
    from ember.errors import EmberError
    cfg = _config(folders, "llama3")
    key = _rope_key(cfg)
    cfg[key] = {**cfg[key], **edit}
    with pytest.raises(EmberError, match=key):
        _load(folders, "llama3", cfg)


def _rope_key(cfg) -> str:
    """transformers >= 5 writes rope_parameters (theta and scaling together), older ones rope_scaling."""
    return "rope_parameters" if "rope_parameters" in cfg else "rope_scaling"


@pytest.mark.parametrize("edit", [{"factor": 0}, {"factor": math.inf}, {"beta_fast": math.nan},
                                  {"original_max_position_embeddings": -16}])
def test_yarn_rope_scaling_holes_are_refused(folders, edit):
    from ember.errors import EmberError
    cfg = _config(folders, "qwen2")
    key = _rope_key(cfg)
    cfg[key] = {**cfg[key], **edit}
    with pytest.raises(EmberError, match=key):
        _load(folders, "qwen2", cfg)


def test_a_tiny_rope_theta_that_overflows_is_refused_not_nan():
    # finite and positive, but 1 / theta ** x overflows: checked on the frequencies themselves
    from ember.models.common.spec import DecoderConfigError, DecoderSpec
    spec = DecoderSpec(vocab_size=10, dim=32, hidden_dim=64, n_layers=1, n_heads=4, rope_theta=1e-300)
    with pytest.raises(DecoderConfigError, match="non-finite rotary frequencies"):
        spec.rotary()
