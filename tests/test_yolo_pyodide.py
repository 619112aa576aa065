"""YOLOv8 inside Pyodide (numpy + pillow wheels of Pyodide 0.27.7): letterbox, the model input (the page's image.c),
a random yolov8n forward, NMS, the built-in PNG writer and Pillow decoding give what CPython gives for the same
inputs."""
import base64
import io
import json

import numpy as np
import pytest
from pyodide_runner import PyodideSession, node_path, pyodide_dist, unavailable  # noqa: F401  (fixture)

import ember
from ember.models.yolo.config import YoloConfig
from ember.models.yolo.draw import encode_png
from ember.models.yolo.image import letterbox, preprocess
from ember.models.yolo.model import YOLOv8
from ember.models.yolo.nms import postprocess
from ember.models.yolo.predict import run_model

SNIPPET = """
import base64, io, json
import numpy as np
import ember
from ember.models.yolo.config import YoloConfig
from ember.models.yolo.draw import encode_png
from ember.backends import cpu_image
from ember.models.yolo.image import letterbox, load_image, preprocess
from ember.models.yolo.model import YOLOv8
from ember.models.yolo.nms import postprocess
from ember.models.yolo.predict import run_model

img = np.frombuffer(base64.b64decode({img!r}), np.uint8).reshape({shape!r})
boxed, lb = letterbox(img, 96)
pre = [preprocess(img, 96)[0].tobytes().hex(), preprocess(img[::2, ::2], 35)[0].tobytes().hex(), cpu_image.describe()]
pred = np.frombuffer(base64.b64decode({pred!r}), np.float32).reshape(6, -1)
ember.manual_seed(0)
model = YOLOv8(YoloConfig.from_scale("n", nc=3)).eval()
weights = {{k: v.numpy().tobytes().hex()[:64] for k, v in list(model.state_dict().items())[:3]}}
raw = run_model(model, boxed.transpose(2, 0, 1)[None].astype(np.float32) / np.float32(255))
decoded = load_image(base64.b64decode({png!r}))
result = {{"boxed": boxed.tobytes().hex(), "lb": [*lb.new_shape, lb.left, lb.top],
           "nms": postprocess(pred, 0.25, 0.45).tolist(), "weights": weights, "raw": raw.tolist(),
           "png": encode_png(img).hex(), "decoded": decoded.tobytes().hex(), "pre": pre}}
"""


@pytest.fixture(scope="module")
def session(pyodide_dist):  # noqa: F811
    if node_path() is None:
        unavailable("ember: node not found on PATH; Pyodide tests need Node.js 20")
    with PyodideSession(packages=("numpy", "pillow"), dist=pyodide_dist) as s:
        yield s


def test_yolo_in_pyodide_matches_cpython(session):
    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, (50, 70, 3), dtype=np.uint8)
    pred = (rng.random((6, 300)) * np.array([[96], [96], [30], [30], [0.6], [0.6]])).astype(np.float32)
    from PIL import Image
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="PNG")
    code = SNIPPET.format(img=base64.b64encode(img.tobytes()).decode(), shape=img.shape,
                          pred=base64.b64encode(pred.tobytes()).decode(),
                          png=base64.b64encode(buf.getvalue()).decode())
    out = session.run(code, timeout=300)["result"]

    boxed, lb = letterbox(img, 96)
    assert out["boxed"] == boxed.tobytes().hex()
    assert out["lb"] == [*lb.new_shape, lb.left, lb.top]
    # the model input from the page's image.c: native's bits (a resize and a strided view's exact 2x downscale)
    assert out["pre"][2] == "cpu_kernels/image.c"
    assert out["pre"][:2] == [preprocess(img, 96)[0].tobytes().hex(), preprocess(img[::2, ::2], 35)[0].tobytes().hex()]
    np.testing.assert_allclose(np.array(out["nms"]), postprocess(pred, 0.25, 0.45), rtol=1e-6)
    assert out["png"] == encode_png(img).hex()
    assert out["decoded"] == img.tobytes().hex()  # Pyodide's Pillow decodes a PNG to the same pixels
    ember.manual_seed(0)
    model = YOLOv8(YoloConfig.from_scale("n", nc=3)).eval()
    sd = list(model.state_dict().items())[:3]
    if out["weights"] != {k: v.numpy().tobytes().hex()[:64] for k, v in sd}:
        raise AssertionError("ember.manual_seed gives different weights in Pyodide: " + json.dumps(out["weights"]))
    raw = run_model(model, boxed.transpose(2, 0, 1)[None].astype(np.float32) / np.float32(255))
    np.testing.assert_allclose(np.array(out["raw"], np.float32), raw, rtol=1e-4, atol=1e-3)
