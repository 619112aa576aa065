"""The parity helper itself must fail on the mistakes it exists to catch, and every output of a
multi-output op (not only output 0) must match torch forward and backward."""
from __future__ import annotations

import pytest
from op_helper import check

MULTI = {
    "max_dim": lambda m, x: x.max(1), "min_dim": lambda m, x: x.min(0),
    "topk": lambda m, x: x.topk(2, dim=1), "sort": lambda m, x: x.sort(dim=1),
    "split": lambda m, x: x.split(2, dim=1), "split_sizes": lambda m, x: m.split(x, [1, 2, 3], dim=1),
    "chunk": lambda m, x: x.chunk(3, dim=1), "unbind": lambda m, x: x.unbind(0),
    "mixed": lambda m, x: (x.exp(), x.argmax(1), x.sum()),
}


@pytest.mark.parametrize("name", sorted(MULTI))
def test_every_output_forward_and_backward(name, device):
    check(MULTI[name], [(4, 6)], device=device)


def _is_torch(m):
    return m.__name__ == "torch"


BROKEN = {  # (fn, inputs, what check must say): ember is wrong in each, in a way the old helper let pass
    "missing_output": (lambda m, x: (x * 2, x * 3) if _is_torch(m) else (x * 2,), 1, "returns 1 outputs, torch 2"),
    "extra_output": (lambda m, x: x * 2 if _is_torch(m) else (x * 2, x), 1, "torch returns Tensor"),
    "second_output_grad": (lambda m, x: (x * 2, x * 3) if _is_torch(m) else (x * 2, (x * 3).detach() + 0 * x), 1,
                           "gradient of input 0"),
    "second_output_no_graph": (lambda m, x: (x * 2, x * 3) if _is_torch(m) else (x * 2, (x * 3).detach()), 1,
                               "output 1: torch can differentiate it"),
    "grad_where_torch_has_none": (lambda m, x, y: x * 2 + (y.detach() if _is_torch(m) else y), 2,
                                  "input 1: torch has no gradient, ember's is nonzero"),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_check_fails_on_a_wrong_op(name):
    fn, n, msg = BROKEN[name]
    with pytest.raises(AssertionError, match=msg):
        check(fn, [(3, 4)] * n)


def test_zero_grad_where_torch_has_none_is_accepted():
    # ember may record a gradient torch leaves as None, as long as it is zero (what torch would say)
    check(lambda m, x, y: x * 2 + (y.detach() if _is_torch(m) else y * 0 + y.detach()), [(3, 4)] * 2)
