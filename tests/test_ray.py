"""ember.ray on a local Ray cluster started here (2 CPUs, one per session of this file): each mapper's
rows equal a single-process ember run item by item, a bad item fails only its own row (`error`), weights
shared through the object store load the same model, and the cluster's temp folder is removed after."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray")
ROOT = Path(__file__).resolve().parents[1]
CLIPS = {"fox.wav": "the quick brown fox jumps over the lazy dog", "ray.wav": "ray runs ember on many machines"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A 2-CPU local Ray cluster for this module; shut down and its temp folder removed afterwards."""
    temp = tmp_path_factory.mktemp("ray")
    ctx = ray.init(num_cpus=2, include_dashboard=False, _temp_dir=str(temp), log_to_driver=False,
                   logging_level="ERROR")  # the workers inherit this process's environment (EMBER_SRC, EMBER_CACHE)
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield ctx
    ray.shutdown()
    shutil.rmtree(temp, ignore_errors=True)
    assert not temp.exists()


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    if not (shutil.which("espeak-ng") and shutil.which("sox")):
        pytest.skip("espeak-ng and sox are needed to make speech clips")
    d = tmp_path_factory.mktemp("clips")
    for name, text in CLIPS.items():
        subprocess.run(["espeak-ng", "-w", str(d / "raw.wav"), text], check=True)
        subprocess.run(["sox", "-R", str(d / "raw.wav"), "-r", "16000", "-c", "1", "-b", "16", str(d / name)], check=True)
    (d / "raw.wav").unlink()
    (d / "broken.wav").write_bytes(b"RIFF\x10\x00\x00\x00WAVEjunk")
    return d


def _by(rows, key):
    return {str(r[key]): r for r in rows}


def test_importing_ember_ray_does_not_import_ray():
    code = "import sys, ember, ember.ray; from ember.ray import Transcriber; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_transcribe_folder_example_equals_one_process(cluster, clips, tmp_path):
    """examples/transcribe_folder.py on the cluster (2 actors, one file per batch, so the broken file's
    batch has no segments at all): the Parquet rows equal transcribe() here, file by file."""
    import pyarrow.parquet as pq

    from ember.models.whisper.load import load_whisper
    from ember.models.whisper.transcribe import transcribe
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        from transcribe_folder import transcribe_folder
    finally:
        sys.path.pop(0)
    assert transcribe_folder(clips, tmp_path / "out", batch_size=1) == 3
    rows = _by(pq.read_table(tmp_path / "out").to_pylist(), "path")
    assert sorted(rows) == sorted(str(p) for p in clips.glob("*.wav"))
    model, _, tok = load_whisper(None)
    for name in CLIPS:
        got, want = rows[str(clips / name)], transcribe(model, tok, str(clips / name))
        assert got["error"] == "" and got["text"] == want["text"]
        assert [s["tokens"] for s in got["segments"]] == [s["tokens"] for s in want["segments"]]
        for g, w in zip(got["segments"], want["segments"]):
            assert (g["start"], g["end"], g["text"]) == (w["start"], w["end"], w["text"])
            assert g["avg_logprob"] == pytest.approx(w["avg_logprob"], abs=1e-4)
    broken = rows[str(clips / "broken.wav")]
    assert broken["text"] == "" and broken["segments"] == [] and broken["error"].startswith("WavError")
    assert str(clips / "broken.wav") in broken["error"]


def test_transcriber_without_ray_reports_bad_rows(clips):
    from ember.ray import Transcriber
    paths = [str(clips / "fox.wav"), str(clips / "missing.wav"), str(clips / "broken.wav")]
    out = Transcriber()({"path": np.array(paths)})
    assert "fox" in out["text"][0].lower() and out["error"][0] == ""
    assert out["error"][1].startswith("FileNotFoundError") and paths[1] in out["error"][1]
    assert out["error"][2].startswith("WavError") and list(out["segments"][1:]) == [[], []]


def _demo_token_table():
    """The demo Llama's embedding rows and tokenizer, read with safetensors + tokenizers (not ember)."""
    from safetensors.numpy import load_file
    from tokenizers import Tokenizer
    demo = ROOT / "models" / "llama" / "demo"
    table = load_file(str(demo / "model.safetensors"))["model.embed_tokens.weight"].astype(np.float32)
    return table, Tokenizer.from_file(str(demo / "tokenizer.json"))


def test_embedder_with_shared_weights_matches_a_reference(cluster, tmp_path, monkeypatch):
    from ember.ray import Embedder
    monkeypatch.setenv("EMBER_CACHE", str(tmp_path / "cache"))  # the driver's copy (actors use theirs)
    texts = ["a for loop", "the while statement", "", "def f(x): return x", "classes and instances"]
    weights = Embedder.share(None)
    ds = ray.data.from_items([{"text": t} for t in texts])
    rows = _by(ds.map_batches(Embedder, fn_constructor_kwargs={"model": weights}, batch_size=2,
                              compute=ray.data.ActorPoolStrategy(size=2)).take_all(), "text")
    table, tok = _demo_token_table()
    for t in texts:
        ids = tok.encode(t, add_special_tokens=False).ids
        if not ids:
            assert np.isnan(rows[t]["embedding"]).all() and "no tokens" in rows[t]["error"]
            continue
        v = table[ids].mean(0)
        assert rows[t]["error"] == ""
        np.testing.assert_allclose(rows[t]["embedding"], v / np.linalg.norm(v), rtol=1e-5, atol=1e-6)
    # the same rows without Ray, from the actor-side copy of the shared weights
    direct = Embedder(weights)({"text": np.array(texts, object)})
    np.testing.assert_array_equal(np.stack([rows[t]["embedding"] for t in texts]), direct["embedding"])


def test_embedder_families_and_embed_fn():
    from ember.ray import Embedder
    with pytest.raises(ValueError, match="no embedder registered for family 'nope'.*register_embedder"):
        Embedder(family="nope")
    e = Embedder(embed_fn=lambda texts: np.array([[len(t), 1.0] for t in texts], np.float32))
    out = e({"text": np.array(["ab", "abcd"]), "id": np.array([7, 8])})
    np.testing.assert_array_equal(out["embedding"], [[2, 1], [4, 1]])
    np.testing.assert_array_equal(out["id"], [7, 8])  # input columns pass through
    bad = e({"text": np.array(["ab", 3], object)})
    assert list(bad["error"][:1]) == [""] and "TypeError" in bad["error"][1]
    assert np.isnan(bad["embedding"][1]).all() and bad["embedding"].shape == (2, 2)


def test_generator_over_ray_equals_stream(cluster):
    from ember.models.llama import load_llama, stream
    from ember.ray import Generator
    prompts = ["The for statement", "A class definition", "The import system"]
    ds = ray.data.from_items([{"prompt": p} for p in prompts])
    rows = _by(ds.map_batches(Generator, fn_constructor_kwargs={"max_new_tokens": 12}, batch_size=2,
                              compute=ray.data.ActorPoolStrategy(size=1)).take_all(), "prompt")
    model, tok = load_llama(None)
    for p in prompts:
        assert rows[p]["error"] == ""
        assert rows[p]["completion"] == "".join(stream(model, tok, p, max_new_tokens=12, temperature=0.0))


def test_detector_without_ray_equals_detect():
    from ember.models.yolo import detect, load_model
    from ember.models.yolo.fetch import ensure_demo_model, ensure_file
    from ember.models.yolo.image import load_image
    from ember.ray import Detector
    bus = ensure_file("bus.jpg")
    det = Detector()
    img = load_image(bus)
    by_image = det({"image": np.stack([img])})
    by_path = det({"path": np.array([str(bus), "/no/such.jpg"])})
    want = detect(load_model(ensure_demo_model()), str(bus))
    assert want, "the demo detector finds people on bus.jpg"
    for got in (by_image["detections"][0], by_path["detections"][0]):
        assert [d["label"] for d in got] == [d["label"] for d in want]
        np.testing.assert_allclose([d["box"] for d in got], [d["box"] for d in want], atol=1e-3)
    assert by_path["error"][0] == "" and "ImageError" in by_path["error"][1] and by_path["detections"][1] == []
    import pyarrow as pa  # the Parquet type Detector.arrow_schema promises holds real detections
    typed = pa.array(list(by_path["detections"]), type=Detector.arrow_types()["detections"]).to_pylist()
    assert [[d["label"] for d in row] for row in typed] == [[d["label"] for d in want], []]


def test_missing_input_column_names_the_ones_it_reads():
    from ember.ray import Embedder
    with pytest.raises(KeyError, match="needs a batch column named 'text'; the batch has \\['txt'\\]"):
        Embedder(embed_fn=lambda t: np.zeros((len(t), 1)))({"txt": np.array(["a"])})


def test_arrow_schema_types_the_empty_lists():
    import pyarrow as pa

    from ember.ray import Detector, Embedder, Generator, Transcriber
    inputs = pa.schema([("path", pa.string()), ("id", pa.int64())])
    s = Transcriber.arrow_schema(inputs)
    assert s.names == ["path", "id", "text", "segments", "error"]
    segs = pa.array([[]], type=s.field("segments").type)                   # a batch with no segments at all
    assert pa.array([[]]).cast(s.field("segments").type).equals(segs)
    assert Detector.arrow_schema(inputs).field("detections").type.value_type.names == ["class", "label", "score", "box"]
    assert Generator.arrow_schema(pa.schema([("prompt", pa.string())])).field("completion").type == pa.string()
    with pytest.raises(TypeError, match="embedding column types come from the data"):
        Embedder.arrow_schema(pa.schema([("text", pa.string())]))


def test_model_files_materialize_once_per_digest(tmp_path):
    from ember.ray import ModelFiles
    src = tmp_path / "m"
    src.mkdir()
    (src / "config.json").write_text(json.dumps({"model_type": "x"}))
    (src / "w.bin").write_bytes(bytes(range(256)))
    (src / ".hidden").write_text("not shipped")
    mf = ModelFiles.read(src)
    assert sorted(mf.files) == ["config.json", "w.bin"] and mf.entry is None
    a, b = mf.materialize(tmp_path / "c"), mf.materialize(tmp_path / "c")
    assert a == b and (a / "w.bin").read_bytes() == bytes(range(256))
    assert [p.name for p in (tmp_path / "c").iterdir()] == [a.name]  # no partial folders left
    one = ModelFiles.read(src / "w.bin")
    assert one.materialize(tmp_path / "c").name == "w.bin" and one.digest != mf.digest
    with pytest.raises(FileNotFoundError, match="neither a file nor a folder"):
        ModelFiles.read(tmp_path / "nope")


def test_embedder_bert_family_equals_sentence_transformers():
    # all-MiniLM-L6-v2 (its config.json says model_type "bert"): the family comes from the folder, and the
    # rows equal sentence-transformers' own embeddings of the same texts (without Ray: the wiring under test)
    import sentence_transformers as st
    from ember.models.bert.fetch import fetch_minilm
    from ember.ray import Embedder
    folder = fetch_minilm()
    texts = ["a for loop", "The cat sat on the mat.", "classes and instances", "Ray runs actors"]
    out = Embedder(folder)({"text": np.array(texts, object)})
    assert list(out["error"]) == [""] * len(texts)
    ref = st.SentenceTransformer(str(folder), device="cpu").encode(texts)
    cos = (out["embedding"] * ref).sum(-1) / np.linalg.norm(ref, axis=-1)
    assert out["embedding"].shape == ref.shape and cos.min() > 1 - 1e-5, cos
