"""Greedy tokens of two computations of one model (cpu and webgpu, float32 and float16 arithmetic) agree except at a
near tie: a step whose reference logits have their best two closer than the two computations' logits differ there,
which either may break its own way (on another GPU or CPU the other way). Asserting plain equality instead makes
the verdict a matter of chance wherever a random model or input happens to put two tokens that close.

A divergence at a step with a clear winner fails; after a near-tie divergence the two continue from different
prefixes and are not compared further (the teacher-forced logits, compared separately, still cover every step)."""
from __future__ import annotations

import numpy as np


def top2_margin(logits) -> float:
    """The best logit minus the second best, non-finite (suppressed) entries left out."""
    v = np.sort(np.asarray(logits, np.float64).ravel())
    v = v[np.isfinite(v)]
    return float(v[-1] - v[-2]) if v.size >= 2 else float("inf")


def max_diff(a, b) -> float:
    """The largest difference between two computations' logits of one step, where both are finite."""
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    both = np.isfinite(a) & np.isfinite(b)
    return float(np.abs(a[both] - b[both]).max()) if both.any() else 0.0


def assert_greedy_agrees(got, want, margins, diffs, slack: float = 2.0) -> int | None:
    """`got` equals `want` (the reference's greedy tokens), or first differs at a step i that is a near tie:
    margins[i] (the reference's top-2 margin at step i) <= slack * diffs[i] (the largest logit difference
    between the two computations there). Returns that step, or None when the tokens are equal."""
    got, want = list(got), list(want)
    if got == want:
        return None
    i = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    assert i < len(margins) and i < len(diffs), f"the tokens differ at step {i}, past the logits given: {got} vs {want}"
    assert margins[i] <= slack * diffs[i], (
        f"greedy tokens differ at step {i} ({got[i:i + 1]} vs {want[i:i + 1]}), where the reference's margin "
        f"{margins[i]:.3g} is clear of {slack} x the logit difference {diffs[i]:.3g}: {got} vs {want}")
    print(f"near tie at step {i}: margin {margins[i]:.3g}, logit difference {diffs[i]:.3g}; compared up to there")
    return i
