"""Hostile config.json: values that size allocations are bounded by ember.limits, and a config that
describes a far bigger model than the weights is refused before the model is built (issue #17)."""
import json
import resource

import ember
import pytest
from ember.models.llama.config import LlamaConfig, LlamaConfigError
from ember.models.llama.load import load_llama, save_pretrained
from ember.models.llama.model import Llama
from ember.models.whisper.config import ModelDimensions

TINY = {"vocab_size": 64, "dim": 32, "hidden_dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "max_seq_len": 32}


@pytest.mark.parametrize("field,value,setting", [
    ("max_position_embeddings", 50_000_000, "max_context"),  # was 3.4 GB of rope tables
    ("vocab_size", 1 << 30, "max_vocab"),
    ("num_hidden_layers", 100_000, "max_layers"),
    ("hidden_size", 1 << 20, "max_width"),
])
def test_llama_config_values_are_bounded(field, value, setting):
    hf = {**LlamaConfig(**TINY).to_hf(), field: value}
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # (named as config.json spells it: the shared field check reads the file's keys before the spec is made)
    with pytest.raises(ember.LimitError, match=rf"llama config.json: config field {field} is {value}, over the limit") as e:
        LlamaConfig.from_hf(hf)
    assert e.value.setting == setting
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 50 << 10  # KB: nothing was allocated


def test_a_config_bigger_than_its_weights_is_refused_before_building(tmp_path):
    save_pretrained(Llama(LlamaConfig(**TINY)), str(tmp_path))
    model, _ = load_llama(str(tmp_path))  # the honest folder loads
    assert model.config.n_layers == 2
    cfg = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": 1000, "hidden_size": 4096,
                                                      "intermediate_size": 11008, "head_dim": 128}))
    with pytest.raises(LlamaConfigError, match="config.json describes .* parameters, the weights hold"):
        load_llama(str(tmp_path))


def test_whisper_config_values_are_bounded():
    hf = {"num_mel_bins": 80, "max_source_positions": 1500, "d_model": 384, "encoder_attention_heads": 6,
          "encoder_layers": 4, "vocab_size": 51864, "max_target_positions": 448, "decoder_attention_heads": 6,
          "decoder_layers": 4}
    assert ModelDimensions.from_hf(hf).n_vocab == 51864
    for field, value in [("vocab_size", 10 ** 9), ("max_target_positions", 50_000_000), ("decoder_layers", 5000)]:
        with pytest.raises(ember.LimitError, match=f"config.json: config field {field} is {value}"):
            ModelDimensions.from_hf({**hf, field: value})
