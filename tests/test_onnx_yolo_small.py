"""YOLOv8s `best_fp16.onnx` through ember.onnx on every device, at 160x160, against onnxruntime.

The export is static (input 1x3x640x640; the head's anchor grid, stride row and DFL reshapes hold 8400 =
80^2 + 40^2 + 20^2 anchors as constants), so the test re-targets it: the input dims and those five
constants are rewritten for 160x160 (525 anchors) with the `onnx` package, exactly as ultralytics'
make_anchors lays them out, and both runtimes run the rewritten model. The whole graph -- 64 convolutions,
SiLU, SPPF max pools, nearest Resize, Concat/Split, the DFL softmax and the box decode -- at 1/16 of
the full size's cost.

Devices: every test device (the `device` fixture). On lavapipe the webgpu run takes ~5 s with the
convolutions as GEMM (webgpu/conv_gemm.py); with the direct conv kernel it took ~260 s.
"""

import numpy as np
import pytest

from expected_skips import missing

SIZE = 160
STRIDES = (8, 16, 32)


def _anchors(size):
    """ultralytics.utils.tal.make_anchors with offset 0.5: (2, N) cell centres in grid units, (N,) strides."""
    pts, st = [], []
    for s in STRIDES:
        n = size // s
        y, x = np.meshgrid(np.arange(n) + 0.5, np.arange(n) + 0.5, indexing="ij")
        pts.append(np.stack([x.ravel(), y.ravel()]))
        st.append(np.full(n * n, s))
    return np.concatenate(pts, 1).astype(np.float32), np.concatenate(st).astype(np.float32)


def retarget(path, size) -> bytes:
    """best_fp16.onnx rewritten for a size x size input (its 8400-anchor constants for this size's)."""
    import onnx
    from onnx import numpy_helper
    m = onnx.load(str(path))
    full, _ = _anchors(640)
    anchors, strides = _anchors(size)
    n = anchors.shape[1]
    for t in m.graph.initializer:
        a = numpy_helper.to_array(t)
        if a.dtype == np.int64 and a.ndim == 1 and a[-1] == full.shape[1]:  # the DFL's reshape targets
            new = a.copy()
            new[-1] = n
        elif a.shape == (1, 2, full.shape[1]):
            assert np.array_equal(a[0], full), f"{t.name}: not the anchor grid this rewrite assumes"
            new = anchors[None]
        elif a.shape == (1, full.shape[1]):
            new = strides[None]
        else:
            continue
        t.CopyFrom(numpy_helper.from_array(new, t.name))
    del m.graph.value_info[:]  # shapes inferred for 640 (onnxruntime would merge them with a warning)
    for vi, dims in ((m.graph.input[0], (1, 3, size, size)), (m.graph.output[0], (1, 6, n))):
        for d, v in zip(vi.type.tensor_type.shape.dim, dims):
            d.dim_value = v
    return m.SerializeToString()


@pytest.fixture(scope="module")
def small_yolo():
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError:
        missing("onnx and onnxruntime are the references for ONNX models")
    from ember.models.yolo.fetch import YoloFetchError, ensure_file
    try:
        path = ensure_file("best_fp16.onnx")
    except YoloFetchError as e:
        missing(f"YOLOv8s best_fp16.onnx could not be fetched: {e}")
    return retarget(path, SIZE)


def test_anchor_layout_is_ultralytics():
    """The rewrite's premise, checked on the shipped model: its constants are make_anchors(640)."""
    try:
        import onnx
        from onnx import numpy_helper
    except ImportError:
        missing("pip onnx is not installed (it generates the ONNX node test cases)")
    from ember.models.yolo.fetch import YoloFetchError, ensure_file
    try:
        m = onnx.load(str(ensure_file("best_fp16.onnx")))
    except YoloFetchError as e:
        missing(f"YOLOv8s best_fp16.onnx could not be fetched: {e}")
    anchors, strides = _anchors(640)
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    grids = [a for a in inits.values() if a.shape == (1, 2, 8400)]
    rows = [a for a in inits.values() if a.shape == (1, 8400)]
    assert grids and all(np.array_equal(a[0], anchors) for a in grids)
    assert rows and all(np.array_equal(a[0], strides) for a in rows)


def test_yolov8s_160_matches_onnxruntime(small_yolo, device):
    """Tolerance: boxes 2e-3 px + 1e-4 relative, scores 1e-4 absolute (float32 over 64 convolutions;
    webgpu sums in another order)."""
    import onnxruntime as ort

    from ember.onnx import InferenceSession
    x = np.random.default_rng(1).random((1, 3, SIZE, SIZE), dtype=np.float32)
    (want,) = ort.InferenceSession(small_yolo, providers=["CPUExecutionProvider"]).run(None, {"images": x})
    (got,) = InferenceSession(small_yolo, device=device).run(None, {"images": x})
    assert got.shape == want.shape == (1, 6, 525)
    np.testing.assert_allclose(got[:, :4], want[:, :4], rtol=1e-4, atol=2e-3)
    np.testing.assert_allclose(got[:, 4:], want[:, 4:], atol=1e-4)
