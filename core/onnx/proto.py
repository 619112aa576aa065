"""ONNX's messages (onnx/onnx.proto3, IR version 10) as schemas for wire.py, and `load_model`.

Each message decodes to a small class whose attributes are its fields (repeated ones as lists,
absent ones at the protobuf default). Tensor payloads stay zero-copy memoryviews into the file
until tensor_data.to_numpy reads them.
"""
from __future__ import annotations

import os

from .wire import OnnxFormatError, Reader, Schema

MAX_FILE = 2 << 30  # protobuf's own 2 GiB limit on one message; bigger models keep weights as external data


_DEFAULTS = {"int": 0, "uint": 0, "bool": False, "float": 0.0, "double": 0.0, "str": "", "bytes": b""}


def _message(name, fields, schema=None, extra=()):
    """A Schema plus its class: slots named after the fields (and `extra`), protobuf defaults.
    A recursive message passes the `schema` it declared earlier so the fields refer to it."""
    names = [f[0] for f in fields.values()]
    scalar = {fname: _DEFAULTS.get(kind) for fname, kind, rep in fields.values()
              if not rep and not isinstance(kind, Schema)}
    lists = [fname for fname, _, rep in fields.values() if rep]

    def __init__(self):
        for k in names:
            setattr(self, k, [] if k in lists else scalar.get(k))
        for k in extra:
            setattr(self, k, None)

    def __repr__(self):
        return f"{name}({', '.join(f'{k}={getattr(self, k)!r}' for k in names if getattr(self, k))})"

    schema = schema or Schema(name, {})
    schema.fields = fields
    schema.cls = type(name, (), {"__slots__": tuple(names) + tuple(extra), "__init__": __init__,
                                 "__repr__": __repr__})
    return schema


StringStringEntry = _message("StringStringEntryProto", {1: ("key", "str", False), 2: ("value", "str", False)})
OperatorSetId = _message("OperatorSetIdProto", {1: ("domain", "str", False), 2: ("version", "int", False)})
Dimension = _message("Dimension", {1: ("dim_value", "int", False), 2: ("dim_param", "str", False),
                                   3: ("denotation", "str", False)})
Shape = _message("TensorShapeProto", {1: ("dim", Dimension, True)})

# TypeProto is recursive (sequence of tensors, optional of sequence ...): declare the schema first
Type = Schema("TypeProto", {})
TensorType = _message("TypeProto.Tensor", {1: ("elem_type", "int", False), 2: ("shape", Shape, False)})
SequenceType = _message("TypeProto.Sequence", {1: ("elem_type", Type, False)})
MapType = _message("TypeProto.Map", {1: ("key_type", "int", False), 2: ("value_type", Type, False)})
OptionalType = _message("TypeProto.Optional", {1: ("elem_type", Type, False)})
_message("TypeProto", {
    1: ("tensor_type", TensorType, False), 4: ("sequence_type", SequenceType, False),
    5: ("map_type", MapType, False), 6: ("denotation", "str", False), 8: ("sparse_tensor_type", TensorType, False),
    9: ("optional_type", OptionalType, False)}, Type)

ValueInfo = _message("ValueInfoProto", {1: ("name", "str", False), 2: ("type", Type, False),
                                        3: ("doc_string", "str", False)})

Tensor = _message("TensorProto", {
    1: ("dims", "int", True), 2: ("data_type", "int", False), 4: ("float_data", "float", True),
    5: ("int32_data", "int", True), 6: ("string_data", "bytes", True), 7: ("int64_data", "int", True),
    8: ("name", "str", False), 9: ("raw_data", "span", False), 10: ("double_data", "double", True),
    11: ("uint64_data", "uint", True), 12: ("doc_string", "str", False),
    13: ("external_data", StringStringEntry, True), 14: ("data_location", "int", False)})
SparseTensor = _message("SparseTensorProto", {1: ("values", Tensor, False), 2: ("indices", Tensor, False),
                                              3: ("dims", "int", True)})

# Graph -> Node -> Attribute -> Graph: the same trick
Graph = Schema("GraphProto", {})
Attribute = _message("AttributeProto", {
    1: ("name", "str", False), 2: ("f", "float", False), 3: ("i", "int", False), 4: ("s", "bytes", False),
    5: ("t", Tensor, False), 6: ("g", Graph, False), 7: ("floats", "float", True), 8: ("ints", "int", True),
    9: ("strings", "bytes", True), 10: ("tensors", Tensor, True), 11: ("graphs", Graph, True),
    13: ("doc_string", "str", False), 14: ("tp", Type, False), 15: ("type_protos", Type, True),
    20: ("type", "int", False), 21: ("ref_attr_name", "str", False), 22: ("sparse_tensor", SparseTensor, False),
    23: ("sparse_tensors", SparseTensor, True)})
Node = _message("NodeProto", {
    1: ("input", "str", True), 2: ("output", "str", True), 3: ("name", "str", False), 4: ("op_type", "str", False),
    5: ("attribute", Attribute, True), 6: ("doc_string", "str", False), 7: ("domain", "str", False),
    8: ("overload", "str", False)})
_message("GraphProto", {
    1: ("node", Node, True), 2: ("name", "str", False), 5: ("initializer", Tensor, True),
    10: ("doc_string", "str", False), 11: ("input", ValueInfo, True), 12: ("output", ValueInfo, True),
    13: ("value_info", ValueInfo, True), 15: ("sparse_initializer", SparseTensor, True)}, Graph)

Function = _message("FunctionProto", {
    1: ("name", "str", False), 4: ("input", "str", True), 5: ("output", "str", True),
    6: ("attribute", "str", True), 7: ("node", Node, True), 8: ("doc_string", "str", False),
    9: ("opset_import", OperatorSetId, True), 10: ("domain", "str", False), 11: ("attribute_proto", Attribute, True)})
Model = _message("ModelProto", {
    1: ("ir_version", "int", False), 2: ("producer_name", "str", False), 3: ("producer_version", "str", False),
    4: ("domain", "str", False), 5: ("model_version", "int", False), 6: ("doc_string", "str", False),
    7: ("graph", Graph, False), 8: ("opset_import", OperatorSetId, True),
    14: ("metadata_props", StringStringEntry, True), 25: ("functions", Function, True)},
    extra=("where", "base_dir"))


def _source(src, where):
    if isinstance(src, (bytes, bytearray, memoryview)):
        return memoryview(src).cast("B") if isinstance(src, memoryview) else memoryview(bytes(src)), \
            where or "<onnx bytes>", None
    path = os.fspath(src)
    size = os.path.getsize(path)
    if size > MAX_FILE:
        raise OnnxFormatError(f"ember: {path}: {size} bytes is past protobuf's {MAX_FILE}-byte limit "
                              "for one ModelProto (keep large weights as external data)")
    with open(path, "rb") as f:
        return memoryview(f.read()), where or path, os.path.dirname(os.path.abspath(path))


def load_model(src, where: str | None = None):
    """An .onnx path or bytes -> the decoded ModelProto. `model.base_dir` is where external data lives."""
    buf, where, base = _source(src, where)
    model = Reader(buf, where).decode(Model, 0, len(buf), "ModelProto")
    if model.graph is None:
        raise OnnxFormatError(f"ember: {where}: ModelProto.graph: missing (is this an ONNX model?)")
    model.where, model.base_dir = where, base
    return model


def read_tensor(src, where: str | None = None):
    """A serialized TensorProto (the conformance suite's input_0.pb) -> the decoded TensorProto."""
    buf, where, base = _source(src, where)
    t = Reader(buf, where).decode(Tensor, 0, len(buf), "TensorProto")
    return t, where, base
