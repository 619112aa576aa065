"""ember.onnx: read ONNX models with a pure-Python protobuf decoder and run them on any ember device.

    sess = ember.onnx.InferenceSession("model.onnx", device="cpu")
    sess.get_inputs()[0].name, sess.get_outputs()
    outputs = sess.run(None, {"images": array})     # list of numpy arrays, as onnxruntime

Operators map onto ember's Tensor ops (ops_*.py here), so every backend runs them; an operator
ember lacks is reported when the model loads, with its opset.
"""
from .plan import OnnxNodeError  # noqa: F401
from .proto import load_model, read_tensor  # noqa: F401
from .session import InferenceSession, NodeArg, UnsupportedOperatorError  # noqa: F401
from .wire import OnnxFormatError  # noqa: F401
