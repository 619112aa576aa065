"""Indexing ops vs torch (forward and gradients), on every device."""
import numpy as np
import pytest
import torch

import ember
from op_helper import check, make

IDX = np.array([2, 0, 2, 1])


def _i(m, a):
    return m.tensor(a)  # ember's side creates it on the device under test (op_helper._EmberOn)


GETITEM = {
    "int": lambda m, x: x[1], "neg_int": lambda m, x: x[-1, 2], "slice": lambda m, x: x[1:3, ::2],
    "none_ellipsis": lambda m, x: x[None, ..., 1], "ellipsis": lambda m, x: x[..., 1:],
    "ellipsis_int": lambda m, x: x[..., -2], "int_ellipsis_slice": lambda m, x: x[1, ..., 2:4],
    "ints_around_ellipsis": lambda m, x: x[0, ..., 3], "ellipsis_alone": lambda m, x: x[...],
    "step": lambda m, x: x[::2, 1::3, ::2], "tensor": lambda m, x: x[_i(m, IDX)],
    "tensor_dim1": lambda m, x: x[:, _i(m, IDX)], "two_tensors": lambda m, x: x[_i(m, IDX), _i(m, IDX[::-1].copy())],
    "nonadjacent": lambda m, x: x[_i(m, IDX), :, _i(m, np.array([0, 1, 2, 3]))],
    "tensor_2d": lambda m, x: x[_i(m, np.array([[0, 1], [2, 3]]))], "bool_mask": lambda m, x: x[x > 0.5],
    "bool_row": lambda m, x: x[_i(m, np.array([True, False, True, True]))], "neg_tensor": lambda m, x: x[:, _i(m, np.array([-1, 0]))],
    "list": lambda m, x: x[[0, 2]], "empty_slice": lambda m, x: x[2:2],
}


@pytest.mark.parametrize("name", sorted(GETITEM))
def test_getitem(device, name):
    check(GETITEM[name], [(4, 5, 6)], device=device)


def test_setitem(device):
    def f(m, x):
        y = x * 1
        y[1] = 0.0
        y[:, 2:4] = y[:, :2] * 3
        y[y > 1.5] = -1.0
        y[_i(m, np.array([0, 3])), 1] = 7.0
        return y
    check(f, [(4, 5)], device=device)


def test_gather_scatter_family(device):
    x = make((3, 5))
    idx = np.array([[0, 4, 1], [2, 2, 3], [4, 0, 0]])
    check(lambda m, t: t.gather(1, _i(m, idx)), None, device=device, inputs=[x])
    check(lambda m, t: m.gather(t, 0, _i(m, idx[:2] % 3)), None, device=device, inputs=[x])
    src = make((3, 3))
    check(lambda m, t, s: t.scatter(1, _i(m, np.array([[0, 4, 1], [2, 1, 3], [4, 0, 3]])), s), None, device=device, inputs=[x, src])
    check(lambda m, t, s: t.scatter_add(1, _i(m, idx), s), None, device=device, inputs=[x, src])
    check(lambda m, t, s: t.index_add(0, _i(m, np.array([2, 0, 2])), s), None, device=device, inputs=[x, make((3, 5))])
    check(lambda m, t: t.index_select(1, _i(m, np.array([4, 4, 0]))), None, device=device, inputs=[x])
    check(lambda m, t: m.take_along_dim(t, _i(m, idx), 1), None, device=device, inputs=[x])
    check(lambda m, t: t.masked_fill(_i(m, x > 0), 0.0), None, device=device, inputs=[x])
    check(lambda m, t: m.masked_select(t, _i(m, x > 0)), None, device=device, inputs=[x])
    check(lambda m, t: m.nonzero(t > 0), None, device=device, inputs=[x], grad=False)
    check(lambda m, t: t.scatter(1, _i(m, idx), 2.5), None, device=device, inputs=[x], grad=False)


def test_one_hot_and_embedding(device):
    t = np.array([[0, 3], [2, 1]])
    check(lambda m, x: m.nn.functional.one_hot(_i(m, t), 5), None, device=device, inputs=[t], dtypes=["int64"])
    check(lambda m, w: m.nn.functional.embedding(_i(m, t), w), [(5, 4)], device=device)


def test_index_errors(device):
    x = ember.randn(3, 4, device=device)
    with pytest.raises(IndexError, match="out of bounds"):
        x[3]
    with pytest.raises(IndexError, match="out of bounds"):
        x[ember.tensor([0, 5])]
    with pytest.raises(IndexError, match="out of bounds"):
        x.gather(1, ember.tensor([[4], [0], [0]]))
    with pytest.raises(IndexError, match="too many indices"):
        x[0, 0, 0]
    with pytest.raises(IndexError, match="out of bounds"):
        x[..., 4]  # (an int after the ellipsis indexes the last dim)
    with pytest.raises(IndexError, match="too many indices"):
        x[..., 0, 0, 0]
    with pytest.raises(IndexError, match="out of bounds"):
        x.index_select(0, ember.tensor([-4]))
    with pytest.raises(IndexError, match="out of range"):
        ember.nn.functional.cross_entropy(x, ember.tensor([0, 1, 4]))


def test_basic_keys_without_gradients_are_numpy_views():
    """Ints, slices and one Ellipsis on a tensor recording no gradient take numpy's view directly: the same
    values and shape as numpy, the errors of the full path where numpy's would differ."""
    a = np.arange(2 * 3 * 5, dtype=np.float32).reshape(2, 3, 5)
    x = ember.tensor(a)
    for key in [(..., slice(None, 3)), (..., 4), (1, ...), (1, ..., slice(2, 4)), (...,), (0, 1, ..., 3),
                (..., 1, 2, 3), (..., -1), (slice(None), ..., slice(None, None, 2)), (0, slice(1, 3))]:
        got = x[key]
        assert got.shape == a[key].shape and np.array_equal(got.numpy(), a[key]), key
    for key in [(..., 5), (..., 0, 0, 0, 0), (2, ...)]:
        with pytest.raises(IndexError):
            x[key]
