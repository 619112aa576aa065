"""onnxruntime's contrib quantized operators (MatMulNBits, GatherBlockQuantized, MatMulIntegerToFloat,
DynamicQuantizeMatMul, contrib QuantizeLinear / DequantizeLinear), each alone in a graph built with onnx.helper,
against onnxruntime over their attributes and optional inputs; and the nbits_matmul kernels against the composed
reference (the registry test's own example covers one shape)."""
import numpy as np
import pytest

pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

from onnx_contrib_graphs import MS, compare, ort_saturates_u8s8  # noqa: E402


def _pack(levels, bits):
    """uint8 levels (..., n) -> bytes (..., n * bits / 8), the first level in the low bits."""
    per = 8 // bits
    lv = levels.reshape(*levels.shape[:-1], -1, per).astype(np.uint16)
    return sum(lv[..., i] << (i * bits) for i in range(per)).astype(np.uint8)


def nbits_weight(rng, n, k, bits, block, zp):
    """(B (N, blocks, blob), scales (N, blocks), zero points or None) as MatMulNBitsQuantizer lays them out."""
    blocks = -(-k // block)
    levels = rng.integers(0, 1 << bits, (n, blocks * block)).astype(np.uint8)
    b = _pack(levels, bits).reshape(n, blocks, block * bits // 8)
    scales = (rng.random((n, blocks)) * 0.1 + 0.01).astype(np.float32)
    if zp == "packed":
        z = rng.integers(0, 1 << bits, (n, -(-blocks * bits // 8) * (8 // bits))).astype(np.uint8)
        return b, scales, _pack(z, bits)
    if zp == "float":
        return b, scales, (rng.random((n, blocks)) * (1 << bits)).astype(np.float32)
    return b, scales, None


@pytest.mark.parametrize("bits,block,k,zp", [(4, 32, 64, None), (4, 32, 64, "packed"), (4, 128, 256, "packed"),
                                             (4, 16, 40, "packed"), (4, 32, 64, "float"), (8, 32, 64, "packed"),
                                             (8, 64, 96, None), (2, 32, 64, "packed")])
@pytest.mark.parametrize("m", [1, 5])
def test_matmul_nbits(device, rng, bits, block, k, zp, m):
    """Asymmetric (packed uint8 or float zero points) and symmetric (the default zero point 2^(bits-1)), K a
    multiple of the block or not, one row (the compiled decode kernel) or several (slabs)."""
    n = 24
    b, scales, z = nbits_weight(rng, n, k, bits, block, zp)
    inits = {"B": b, "scales": scales, **({"zp": z} if z is not None else {}), "bias": rng.standard_normal(n).astype(np.float32)}
    node = helper.make_node("MatMulNBits", ["A", "B", "scales", "zp" if z is not None else "", "", "bias"], ["Y"],
                            domain=MS, K=k, N=n, bits=bits, block_size=block)
    a = rng.standard_normal((2, m, k) if m > 1 else (m, k)).astype(np.float32)
    compare(device, node, {"A": a}, ["Y"], inits, rtol=1e-4, atol=1e-4)


def test_matmul_nbits_g_idx(device, rng):
    """g_idx (deprecated) naming each input feature's block: trivial (kept quantized) and permuted, with float zero
    points (onnxruntime's CPU kernel ignores packed uint8 zero points where g_idx is given: it subtracts 8)."""
    n, k, block = 16, 64, 32
    b, scales, z = nbits_weight(rng, n, k, 4, block, "float")
    a = rng.standard_normal((3, k)).astype(np.float32)
    for g in (np.arange(k) // block, rng.permutation(np.arange(k) // block)):
        node = helper.make_node("MatMulNBits", ["A", "B", "scales", "zp", "g_idx"], ["Y"], domain=MS, K=k, N=n,
                                bits=4, block_size=block)
        compare(device, node, {"A": a}, ["Y"], {"B": b, "scales": scales, "zp": z, "g_idx": g.astype(np.int32)},
                atol=1e-4)


def test_nbits_kernels_match_composed(device, rng):
    """The device's nbits_matmul kernel against its composed reference (dequantize, matmul) on decode and prefill
    shapes, the weight an odd K with a partial last block."""
    import ember
    from ember.ops_blockwise import BlockWeight, nbits_matmul_composed
    n, k, block = 40, 72, 32
    b, scales, z = nbits_weight(rng, n, k, 4, block, "float")
    w = BlockWeight(b.reshape(n, -1), scales, z, 4, block, (n, k))
    for rows in (1, 3, 17):
        x = ember.tensor(rng.standard_normal((rows, k)).astype(np.float32), device=device)
        want = nbits_matmul_composed(x, w.packed, w.scales, w.zeros, 4, block, w.shape).numpy()
        np.testing.assert_allclose(w.matmul_t(x).numpy(), want, rtol=1e-5, atol=1e-5)


def _int4_tensor(name, values, dims, signed):
    """An int4 / uint4 initializer (onnx packs two values a byte)."""
    return helper.make_tensor(name, TensorProto.INT4 if signed else TensorProto.UINT4, dims,
                              np.asarray(values).reshape(-1).tolist())


@pytest.mark.parametrize("kind,zp", [("uint8", False), ("uint8", True), ("int4", False), ("uint4", True)])
def test_gather_block_quantized(device, rng, kind, zp):
    """A quantized embedding table (vocab 10, hidden 64, blocks of 16 along the hidden axis): uint8 holding two
    4-bit levels a byte, or int4 / uint4; picked rows with negative indices."""
    from ember.onnx import InferenceSession
    from onnx_contrib_graphs import ort
    vocab, hidden, block = 10, 64, 16
    blocks = hidden // block
    idx = np.array([[0, 3, -1], [9, 2, 2]], np.int64)
    scales = (rng.random((vocab, blocks)) * 0.1 + 0.01).astype(np.float32)
    inits = [helper.make_tensor("scales", TensorProto.FLOAT, scales.shape, scales.reshape(-1).tolist())]
    if kind == "uint8":
        lv = rng.integers(0, 16, (vocab, hidden)).astype(np.uint8)
        inits.append(helper.make_tensor("data", TensorProto.UINT8, (vocab, hidden // 2), _pack(lv, 4).reshape(-1).tolist()))
        if zp:
            z = rng.integers(0, 16, (vocab, blocks)).astype(np.uint8)
            inits.append(helper.make_tensor("zp", TensorProto.UINT8, (vocab, blocks // 2), _pack(z, 4).reshape(-1).tolist()))
    else:
        signed = kind == "int4"
        lv = rng.integers(-8 if signed else 0, 8 if signed else 16, (vocab, hidden))
        inits.append(_int4_tensor("data", lv, (vocab, hidden), signed))
        if zp:
            inits.append(_int4_tensor("zp", rng.integers(0, 16, (vocab, blocks)), (vocab, blocks), signed))
    node = helper.make_node("GatherBlockQuantized", ["data", "idx", "scales"] + (["zp"] if zp else []), ["y"],
                            domain=MS, bits=4, block_size=block, gather_axis=0, quantize_axis=1)
    g = helper.make_graph([node], "gbq", [helper.make_tensor_value_info("idx", TensorProto.INT64, idx.shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)])
    m.ir_version = 10
    m = m.SerializeToString()
    (want,) = ort().InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, {"idx": idx})
    (got,) = InferenceSession(m, device=device).run(None, {"idx": idx})
    assert got.shape == want.shape == (2, 3, hidden)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("a_type,b_type", [(np.uint8, np.int8), (np.int8, np.int8), (np.uint8, np.uint8)])
@pytest.mark.parametrize("zps,per_column", [(False, False), (True, False), (True, True)])
def test_matmul_integer_to_float(device, rng, a_type, b_type, zps, per_column):
    lo = lambda t: -128 if t == np.int8 else 0  # noqa: E731
    a = rng.integers(lo(a_type), lo(a_type) + 256, (2, 5, 40)).astype(a_type)
    b = rng.integers(lo(b_type), lo(b_type) + 256, (40, 12)).astype(b_type)
    inits = {"b": b, "a_scale": np.array(0.02, np.float32),
             "b_scale": (rng.random(12) * 0.05 + 0.01).astype(np.float32) if per_column else np.array(0.03, np.float32),
             "bias": rng.standard_normal(12).astype(np.float32)}
    names = ["a", "b", "a_scale", "b_scale", "", "", "bias"]
    if zps:
        inits["a_zp"] = np.array(lo(a_type) + 7, a_type)
        inits["b_zp"] = (rng.integers(lo(b_type), lo(b_type) + 20, 12) if per_column else np.array(lo(b_type) + 3)).astype(b_type)
        names[4:6] = ["a_zp", "b_zp"]
    node = helper.make_node("MatMulIntegerToFloat", names, ["y"], domain=MS)
    reference = None
    if a_type == np.uint8 and b_type == np.int8 and ort_saturates_u8s8():  # (the definition, exact, in its place)
        acc = (a.astype(np.int64) - int(inits.get("a_zp", 0))) @ (b.astype(np.int64) - inits.get("b_zp", 0))
        reference = [acc * (inits["a_scale"].astype(np.float64) * inits["b_scale"]) + inits["bias"]]
    compare(device, node, {"a": a}, ["y"], inits, rtol=1e-5, atol=1e-4, reference=reference)


@pytest.mark.parametrize("b_type", [np.int8, np.uint8])
@pytest.mark.parametrize("zp,bias", [(False, False), (True, True)])
def test_dynamic_quantize_matmul(device, rng, b_type, zp, bias):
    lo = -128 if b_type == np.int8 else 0
    b = rng.integers(lo, lo + 256, (32, 10)).astype(b_type)
    inits = {"b": b, "b_scale": (rng.random(10) * 0.01).astype(np.float32)}
    names = ["a", "b", "b_scale", "", ""]
    if zp:
        inits["b_zp"] = rng.integers(lo, lo + 10, 10).astype(b_type)
        names[3] = "b_zp"
    if bias:
        inits["bias"] = rng.standard_normal(10).astype(np.float32)
        names[4] = "bias"
    node = helper.make_node("DynamicQuantizeMatMul", [n for n in names], ["y"], domain=MS)
    a = rng.standard_normal((3, 32)).astype(np.float32)
    reference = None
    if b_type == np.int8 and ort_saturates_u8s8():  # (the definition, exact, in its place)
        # DynamicQuantizeLinear's uint8 a (its range widened to hold 0, zero point rounded half to even), then
        # the exact integer product, scaled
        lo_a, hi_a = min(0.0, float(a.min())), max(0.0, float(a.max()))
        sa = np.float32((hi_a - lo_a) / 255)
        za = np.clip(np.rint(-lo_a / sa), 0, 255)
        qa = np.clip(np.rint(a / sa) + za, 0, 255)
        acc = (qa - za) @ (b.astype(np.float64) - inits.get("b_zp", np.zeros(10)).astype(np.float64))
        reference = [acc * (np.float64(sa) * inits["b_scale"]) + inits.get("bias", 0.0)]
    compare(device, node, {"a": a}, ["y"], inits, rtol=1e-5, atol=1e-4, reference=reference)


@pytest.mark.parametrize("zp_type", [np.uint8, np.int8])
@pytest.mark.parametrize("per_axis", [False, True])
def test_contrib_quantize_dequantize(device, rng, zp_type, per_axis):
    x = (rng.standard_normal((3, 4)) * 3).astype(np.float32)
    scale = (rng.random(4) * 0.05 + 0.01).astype(np.float32) if per_axis else np.array(0.03, np.float32)
    zp = rng.integers(-5, 5, 4).astype(zp_type) if per_axis else np.array(3, zp_type)
    attrs = {"axis": 1} if per_axis else {}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], domain=MS, **attrs),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], domain=MS, **attrs)]
    compare(device, nodes, {"x": x}, [("q", zp_type), "y"], {"s": scale, "z": zp}, rtol=1e-6, atol=1e-6)
