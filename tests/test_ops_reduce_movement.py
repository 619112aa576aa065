"""Reductions, movement and matmul: forward and gradients vs torch, on every device."""
import numpy as np
import pytest

from op_helper import check, make

REDUCE = {
    "sum": lambda m, x: x.sum(), "sum1": lambda m, x: x.sum(1), "sum_neg_keep": lambda m, x: x.sum(-1, keepdim=True),
    "sum_multi": lambda m, x: x.sum((0, 2)), "mean": lambda m, x: x.mean(), "mean0": lambda m, x: x.mean(0),
    "var": lambda m, x: x.var(1), "var_biased": lambda m, x: x.var(1, unbiased=False),
    "std": lambda m, x: x.std(-1, keepdim=True), "amax": lambda m, x: x.amax(1), "amin": lambda m, x: x.amin(-1),
    "max_all": lambda m, x: x.max(), "min_all": lambda m, x: x.min(),
    "max_dim": lambda m, x: x.max(1)[0], "max_idx": lambda m, x: x.max(1)[1], "min_dim_keep": lambda m, x: x.min(2, keepdim=True)[0],
    "argmax": lambda m, x: x.argmax(), "argmax1": lambda m, x: x.argmax(1), "argmin": lambda m, x: x.argmin(-1, keepdim=True),
    "prod": lambda m, x: x.prod(1), "cumsum": lambda m, x: x.cumsum(1), "cumsum0": lambda m, x: m.cumsum(x, 0),
    "logsumexp": lambda m, x: x.logsumexp(-1), "logsumexp2": lambda m, x: m.logsumexp(x, (0, 1)),
    "norm": lambda m, x: x.norm(dim=-1),
}


@pytest.mark.parametrize("name", sorted(REDUCE))
def test_reduce(device, name):
    check(REDUCE[name], [(3, 4, 5)], device=device, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["sum1", "mean0", "amax", "cumsum", "prod"])
def test_reduce_non_contiguous(device, name):
    check(REDUCE[name], [(4, 5, 3)], device=device, transpose=True)


def test_reduce_low_precision(device):
    for dt in ("float16", "bfloat16"):
        check(lambda m, x: x.sum(-1) + x.mean(0).sum(), [(8, 16)], device=device, dtype=dt, atol=5e-2, rtol=2e-2)


def test_reduce_ties_and_zeros(device):
    x = np.array([[1.0, 3.0, 3.0, 0.0], [2.0, 0.0, 0.0, 5.0], [0.0, 1.0, 2.0, 3.0]], np.float32)
    check(lambda m, t: t.amax(1), None, device=device, inputs=[x])   # ties share the gradient
    check(lambda m, t: t.max(), None, device=device, inputs=[x])
    check(lambda m, t: t.prod(1), None, device=device, inputs=[x])   # zero-safe product gradient
    check(lambda m, t: t.max(1)[0], None, device=device, inputs=[x])  # gradient to the argmax index


def test_reduce_int_and_bool(device):
    i = make((3, 4), "int64", -3, 3)
    for f in (lambda m, x: x.sum(), lambda m, x: x.sum(0), lambda m, x: x.prod(1), lambda m, x: x.amax(1),
              lambda m, x: x.argmax(1), lambda m, x: x.cumsum(1), lambda m, x: (x > 0).sum(1),
              lambda m, x: (x > 0).all(1), lambda m, x: (x > 0).any()):
        check(f, None, device=device, inputs=[i], dtypes=["int64"])


def test_empty_reductions(device):
    check(lambda m, x: x.sum(0), [(0, 3)], device=device)
    check(lambda m, x: x.sum(), [(0,)], device=device)
    check(lambda m, x: x.mean(1), [(0, 3)], device=device)


def test_sort_topk(device):
    x = make((4, 7))
    x[0, :3] = 0.5  # ties keep index order (stable)
    check(lambda m, t: t.argsort(-1), None, device=device, inputs=[x], grad=False)
    check(lambda m, t: t.argsort(0, descending=True), None, device=device, inputs=[x], grad=False)
    check(lambda m, t: t.sort(1, descending=True)[0], None, device=device, inputs=[x])
    y = make((4, 7), low=-3)  # torch.topk does not order ties: compare on distinct values
    check(lambda m, t: t.topk(3)[0], None, device=device, inputs=[y])
    check(lambda m, t: t.topk(2, dim=0, largest=False)[1], None, device=device, inputs=[y], grad=False)


MOVE = {
    "reshape": lambda m, x: x.reshape(4, -1), "view": lambda m, x: x.view(2, 2, 30),
    "flatten": lambda m, x: x.flatten(1), "transpose": lambda m, x: x.transpose(0, 2) * 1,
    "permute": lambda m, x: x.permute(2, 0, 1), "unsqueeze": lambda m, x: x.unsqueeze(-1) * 2,
    "squeeze": lambda m, x: x.unsqueeze(1).squeeze(1), "expand": lambda m, x: x[:, :1].expand(4, 6, 5),
    "narrow": lambda m, x: x.narrow(1, 1, 3), "chunk": lambda m, x: x.chunk(2, 2)[1],
    "split": lambda m, x: x.split([2, 4], 1)[1], "split_int": lambda m, x: x.split(2, 2)[2],
    "cat": lambda m, x: m.cat([x, x * 2], 1), "stack": lambda m, x: m.stack([x, x + 1], -1),
    "flip": lambda m, x: x.flip(0, 2), "roll": lambda m, x: x.roll(2, 1), "roll_multi": lambda m, x: x.roll((1, -2), (0, 2)),
    "repeat": lambda m, x: x.repeat(2, 1, 3), "tril": lambda m, x: x.tril(), "triu": lambda m, x: x.triu(1),
    "T2d": lambda m, x: x[0].T, "unbind": lambda m, x: x.unbind(1)[3],
    "repeat_interleave": lambda m, x: x.repeat_interleave(2, dim=1), "movedim": lambda m, x: x.movedim(0, -1),
    "unfold": lambda m, x: x.unfold(1, 2, 2),
}


@pytest.mark.parametrize("name", sorted(MOVE))
def test_movement(device, name):
    check(MOVE[name], [(4, 6, 5)], device=device)


def test_movement_non_contiguous(device):
    check(lambda m, x: x.reshape(-1).reshape(3, 5) + x.flip(1).transpose(0, 1).reshape(3, 5), [(3, 5)],
          device=device, transpose=True)


MATMUL_SHAPES = [((3, 4), (4, 5)), ((4,), (4,)), ((4,), (4, 3)), ((2, 3, 4), (4,)), ((2, 3, 4), (2, 4, 5)),
                 ((2, 1, 3, 4), (5, 4, 2)), ((1, 4), (4, 1)), ((0, 4), (4, 3)), ((3, 0), (0, 2))]


@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=str)
def test_matmul(device, shapes):
    check(lambda m, a, b: a @ b, list(shapes), device=device, atol=1e-5, rtol=1e-5)


def test_matmul_non_contiguous_and_low_precision(device):
    check(lambda m, a, b: m.matmul(a, b), [(5, 6), (6, 7)], device=device, transpose=True, atol=1e-5)
    for dt in ("float16", "bfloat16"):
        check(lambda m, a, b: a @ b, [(8, 16), (16, 4)], device=device, dtype=dt, atol=5e-2, rtol=2e-2)
    check(lambda m, a, b: a @ b, None, device=device, inputs=[make((3, 4), "int64"), make((4, 2), "int64")],
          dtypes=["int64", "int64"])


def test_einsum_matmul_splits_rows_past_the_wasm_iterator_limit(monkeypatch):
    # Pyodide multiplies with einsum, whose iterator (batch x M x K x N) must fit a 32-bit intp: larger
    # products go a block of rows at a time, or to np.matmul when one row is already too large
    from ember.backends import cpu_matmul as NB
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 7, 5)).astype(np.float32), rng.standard_normal((5, 3)).astype(np.float32)
    for limit in (10 ** 6, 2 * 5 * 3 * 2, 2 * 5 * 3 - 1):  # one call, blocks of 2 rows, np.matmul
        monkeypatch.setattr(NB, "_EINSUM_ITER_MAX", limit)
        np.testing.assert_allclose(NB.einsum_matmul(a, b), a @ b, rtol=1e-6, atol=1e-6)
