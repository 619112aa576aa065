"""Einsum as broadcast products and sums: operands are aligned on one label order, multiplied two at a
time, and each label is summed away as soon as no later operand or the output needs it."""
from __future__ import annotations

from .. import ops_movement as M
from .. import ops_reduce as R


def _parse(equation, ins):
    eq = equation.replace(" ", "")
    lhs, _, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ins):
        raise ValueError(f"ember: Einsum {equation!r}: {len(terms)} terms for {len(ins)} inputs")
    letters = sorted({c for t in terms for c in t if c.isalpha()})
    spare = iter(c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" if c not in letters)
    n_ell = max((x.ndim - (len(t) - 3) for t, x in zip(terms, ins) if "..." in t), default=0)
    ell = "".join(next(spare) for _ in range(n_ell))
    out_terms = []
    for t, x in zip(terms, ins):
        if "..." in t:
            k = x.ndim - (len(t) - 3)
            t = t.replace("...", ell[n_ell - k:])
        out_terms.append(t)
    if not _:
        counts = {}
        for t in out_terms:
            for c in t:
                counts[c] = counts.get(c, 0) + 1
        rhs = ell + "".join(sorted(c for c in counts if counts[c] == 1 and c not in ell))
    else:
        rhs = rhs.replace("...", ell)
    return out_terms, rhs


def _diagonal(x, term):
    """Repeated labels in one term (ii->i) take the diagonal."""
    while len(set(term)) < len(term):
        for i, c in enumerate(term):
            j = term.find(c, i + 1)
            if j >= 0:
                break
        n = x.shape[i]
        x = M.movedim(M.movedim(x, i, -1), j - 1 if j > i else j, -1)  # (..., n, n)
        flat = M.reshape(x, *x.shape[:-2], n * n)
        x = flat[..., ::n + 1]
        term = term[:i] + term[i + 1:j] + term[j + 1:] + c
    return x, term


def einsum(equation, ins, ctx=None):
    terms, rhs = _parse(equation, ins)
    ops = []
    sizes = {}
    for x, t in zip(ins, terms):
        x, t = _diagonal(x, t)
        for c, d in zip(t, x.shape):
            if sizes.get(c, 1) == 1:
                sizes[c] = d
        ops.append((x, t))
    order = sorted(sizes)  # one label order for every operand

    def aligned(x, t):
        x = M.permute(x, *[t.index(c) for c in sorted(t, key=order.index)]) if t else x
        t = "".join(sorted(t, key=order.index))
        shape = [x.shape[t.index(c)] if c in t else 1 for c in order]
        return M.reshape(x, *shape)

    acc, acc_labels = None, set()
    for i, (x, t) in enumerate(ops):
        y = aligned(x, t)
        acc = y if acc is None else acc * y
        acc_labels |= set(t)
        later = set(rhs).union(*[set(tt) for _, tt in ops[i + 1:]])
        drop = [order.index(c) for c in acc_labels if c not in later]
        if drop:
            acc = R.sum(acc, dim=tuple(drop), keepdim=True)
            acc_labels -= {order[d] for d in drop}
    keep = [c for c in order if c in rhs]
    acc = M.reshape(acc, *[acc.shape[order.index(c)] for c in keep])
    return M.permute(acc, *[keep.index(c) for c in rhs]) if rhs else acc
