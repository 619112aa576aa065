"""greedy_ties.py lets greedy tokens part only at a near tie."""
import numpy as np
import pytest

from greedy_ties import assert_greedy_agrees, max_diff, top2_margin


def test_tokens_may_part_only_where_the_reference_nearly_ties():
    assert top2_margin([1.0, 3.0, -np.inf, 2.5]) == 0.5 and max_diff([1, -np.inf, 2], [1.5, 0, 2]) == 0.5
    margins, diffs = [0.5, 0.01, 0.4], [0.02, 0.02, 0.02]
    assert assert_greedy_agrees([4, 5, 6], [4, 5, 6], margins, diffs) is None
    assert assert_greedy_agrees([4, 9, 1], [4, 5, 6], margins, diffs) == 1       # step 1: 0.01 <= 2 x 0.02
    with pytest.raises(AssertionError, match="step 0"):
        assert_greedy_agrees([7, 5, 6], [4, 5, 6], margins, diffs)                # step 0: a clear winner
    with pytest.raises(AssertionError, match="step 2"):
        assert_greedy_agrees([4, 5, 1], [4, 5, 6], margins, diffs)
    with pytest.raises(AssertionError, match="step 2"):
        assert_greedy_agrees([4, 5], [4, 5, 6], margins, diffs)                   # one stopped early, clearly
