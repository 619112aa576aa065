"""Where torch raises, ember raises too (these gave silent wrong results): negative and
out-of-range indices, in-place ops that would grow their tensor, integer division by zero, invalid conv
arguments, non-tensor state-dict values. Each case runs in torch first: the test checks torch refuses it,
then that ember refuses it with a message naming both sides; cases torch accepts must agree in value."""
import numpy as np
import pytest
import torch

import ember


def both(fn):
    """fn(m) with m = torch and m = ember: (torch's exception or None, ember's exception or result)."""
    try:
        fn(torch)
        t_err = None
    except (RuntimeError, IndexError, ValueError, ZeroDivisionError) as e:
        t_err = e
    with pytest.raises(Exception) as e:
        fn(ember)
    return t_err, e.value


X = [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]

REFUSED = {  # name: (expression, ember exception type, words the message must hold)
    "index_select -1": (lambda m: m.tensor(X).index_select(1, m.tensor([-1])), IndexError, ["index -1", "size 3"]),
    "index_select 3": (lambda m: m.tensor(X).index_select(1, m.tensor([3])), IndexError, ["index 3", "size 3"]),
    "gather -1": (lambda m: m.tensor(X).gather(1, m.tensor([[-1], [0]])), IndexError, ["index -1", "size 3"]),
    "scatter -1": (lambda m: m.tensor(X).scatter(1, m.tensor([[-1], [0]]), 1.0), IndexError, ["index -1"]),
    "scatter_add -1": (lambda m: m.tensor(X).scatter_add(1, m.tensor([[-1], [0]]), m.ones(2, 1)), IndexError,
                       ["index -1"]),
    "index_add -1": (lambda m: m.tensor(X).index_add(1, m.tensor([-1]), m.ones(2, 1)), IndexError, ["index -1"]),
    "embedding -1": (lambda m: m.nn.functional.embedding(m.tensor([-1]), m.tensor(X)), IndexError,
                     ["embedding", "index -1", "size 2"]),
    "embedding 2": (lambda m: m.nn.functional.embedding(m.tensor([[0, 2]]), m.tensor(X)), IndexError,
                    ["index 2", "size 2"]),
    "add_ grows": (lambda m: m.zeros(1, 3).add_(m.ones(2, 3)), RuntimeError, ["(2, 3)", "(1, 3)"]),
    "mul_ grows": (lambda m: m.zeros(3).mul_(m.ones(2, 3)), RuntimeError, ["(2, 3)", "(3,)"]),
    "masked_fill_ grows": (lambda m: m.zeros(3).masked_fill_(m.ones(2, 3, dtype=m.bool), 1.0), RuntimeError,
                           ["(2, 3)", "(3,)"]),
    "int // 0": (lambda m: m.tensor([5, 6]) // m.tensor([1, 0]), ZeroDivisionError, ["division by zero", "int64"]),
    "int // scalar 0": (lambda m: m.tensor([5]) // 0, ZeroDivisionError, ["division by zero"]),
    "int % 0": (lambda m: m.tensor([5]) % m.tensor([0]), ZeroDivisionError, ["division by zero"]),
    "fmod int 0": (lambda m: m.fmod(m.tensor([5]), 0), ZeroDivisionError, ["division by zero"]),
    "div trunc int 0": (lambda m: m.div(m.tensor([5]), m.tensor([0]), rounding_mode="trunc"), ZeroDivisionError,
                        ["division by zero"]),
    "int32 // 0": (lambda m: m.tensor([5], dtype=m.int32) // m.tensor([0], dtype=m.int32), ZeroDivisionError,
                   ["int32"]),
    "conv2d stride 0": (lambda m: m.nn.functional.conv2d(m.zeros(1, 1, 4, 4), m.zeros(1, 1, 2, 2), stride=0),
                        ValueError, ["stride (0, 0)", "positive"]),
    "conv2d padding -1": (lambda m: m.nn.functional.conv2d(m.zeros(1, 1, 4, 4), m.zeros(1, 1, 2, 2), padding=-1),
                          ValueError, ["padding (-1, -1)"]),
    "conv2d dilation 0": (lambda m: m.nn.functional.conv2d(m.zeros(1, 1, 4, 4), m.zeros(1, 1, 2, 2), dilation=0),
                          ValueError, ["dilation (0, 0)"]),
    "conv2d bias length": (lambda m: m.nn.functional.conv2d(m.zeros(1, 1, 4, 4), m.zeros(2, 1, 2, 2), bias=m.zeros(3)),
                           ValueError, ["(2, 1, 2, 2)", "(2,)", "(3,)"]),
    "conv1d stride 0": (lambda m: m.nn.functional.conv1d(m.zeros(1, 1, 4), m.zeros(1, 1, 2), stride=0), ValueError,
                        ["stride (0,)"]),
    "conv_transpose2d stride 0": (lambda m: m.nn.functional.conv_transpose2d(m.zeros(1, 1, 4, 4), m.zeros(1, 1, 2, 2),
                                                                           stride=0), ValueError, ["stride (0, 0)"]),
    "conv_transpose2d bias": (lambda m: m.nn.functional.conv_transpose2d(m.zeros(1, 1, 4, 4), m.zeros(1, 2, 2, 2),
                                                                       bias=m.zeros(1)), ValueError, ["(2,)", "(1,)"]),
    "load_state_dict list": (lambda m: m.nn.Linear(2, 2).load_state_dict({"weight": [[1.0, 2.0], [3.0, 4.0]],
                                                                          "bias": m.zeros(2)}),
                             ember.EmberError, ["'weight'", "list", "not a tensor"]),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_ember_refuses_what_torch_refuses(name):
    fn, kind, words = REFUSED[name]
    t_err, e = both(fn)
    assert t_err is not None, f"torch accepts {name}: the case is wrong"
    assert isinstance(e, kind) and str(e).startswith("ember: "), repr(e)
    for w in words:
        assert w in str(e), (w, str(e))


ACCEPTED = {  # negative indices that torch does take, as Python's: -1 is the last element
    "take_along_dim -1": lambda m: m.tensor(X).take_along_dim(m.tensor([[-1], [0]]), 1),
    "index_fill -1": lambda m: m.tensor(X).index_fill(1, m.tensor([-1]), 9.0),
    "getitem -1": lambda m: m.tensor(X)[:, m.tensor([-1, 0])],
    "float // 0": lambda m: m.tensor([5.0, -5.0]) // 0,
    "add_ same shape": lambda m: m.zeros(2, 3).add_(m.ones(3)),
}


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_what_torch_accepts_agrees(name):
    fn = ACCEPTED[name]
    with np.errstate(divide="ignore"):
        np.testing.assert_array_equal(fn(ember).numpy(), fn(torch).numpy())
