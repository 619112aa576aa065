"""One hierarchy: every error ember raises about its input is an ember.EmberError, and each older class
keeps the builtin base that existing callers catch."""
import importlib

import ember
import pytest

CLASSES = [  # (module, class, the builtin it was before)
    ("ember.io.formats", "FormatError", ValueError), ("ember.nn.module", "StateDictError", KeyError),
    ("ember.tokenizers.errors", "TokenizerError", ValueError), ("ember.models.whisper.wav", "WavError", ValueError),
    ("ember.models.whisper.load", "WhisperLoadError", ValueError),
    ("ember.models.whisper.config", "WhisperConfigError", ValueError),
    ("ember.models.whisper.ct2", "CT2FormatError", ValueError), ("ember.models.llama.config", "LlamaConfigError",
                                                                  ValueError),
    ("ember.models.llama.names", "LlamaWeightsError", ValueError), ("ember.models.yolo.image", "ImageError", ValueError),
    ("ember.models.yolo.config", "YoloConfigError", ValueError),
    ("ember.models.yolo.onnx_reader", "OnnxFormatError", ValueError),
]


@pytest.mark.parametrize("module,name,old", CLASSES, ids=[c[1] for c in CLASSES])
def test_error_classes_are_ember_errors(module, name, old):
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, ember.EmberError) and issubclass(cls, old)


def test_limit_error_names_file_field_and_limit():
    e = ember.LimitError("a.wav", "fmt chunk: sample rate", 10, 5, "max_sample_rate", " Hz")
    assert isinstance(e, ember.FormatError) and (e.where, e.field, e.value, e.limit) == ("a.wav", "fmt chunk: sample rate",
                                                                                         10, 5)
    assert str(e).startswith("ember: a.wav: fmt chunk: sample rate is 10 Hz, over the limit of 5 Hz")
    assert "$EMBER_MAX_SAMPLE_RATE" in str(e)


def test_the_budget_reads_the_environment(monkeypatch):
    from ember.limits import Budget
    monkeypatch.setenv("EMBER_MAX_PIXELS", "1234")
    monkeypatch.setenv("EMBER_LOAD_FACTOR", "2.5")
    b = Budget()
    assert (b.max_pixels, b.load_factor) == (1234, 2.5) and b.load_bytes(100) == 250 + b.load_allowance
    monkeypatch.setenv("EMBER_MAX_PIXELS", "lots")
    with pytest.raises(ValueError, match="EMBER_MAX_PIXELS='lots' is not a number"):
        Budget()


def test_every_error_class_is_an_ember_error():
    # one hierarchy: a caller handling untrusted input (or a missing device/download) catches ember.EmberError
    import importlib
    from ember.errors import EmberError, FormatError
    classes = {"ember.hub": ["HubError", "HubNotFoundError", "ChecksumError"], "ember.device": ["DeviceError"],
               "ember.models.yolo.fetch": ["YoloFetchError"], "ember.models.whisper.fetch": ["WhisperFetchError"],
               "ember.models.whisper.model": ["WhisperShapeError"], "ember.models.gemma3.config": ["Gemma3ConfigError"],
               "ember.models.gemma3.load": ["Gemma3WeightsError"], "ember.wasm.worker_api": ["WorkerError"],
               "ember.wasm.assets": ["PyodideAssetError", "PyodideFetchError"]}
    for module, names in classes.items():
        m = importlib.import_module(module)
        for n in names:
            assert issubclass(getattr(m, n), EmberError), f"{module}.{n}"
    # the older bases stay, so code written against them keeps catching
    from ember.device import DeviceError
    from ember.hub import HubError
    from ember.models.gemma3.config import Gemma3ConfigError
    assert issubclass(DeviceError, RuntimeError) and issubclass(HubError, OSError)
    assert issubclass(Gemma3ConfigError, FormatError) and issubclass(Gemma3ConfigError, ValueError)
