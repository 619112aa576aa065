"""Which skips are expected, and the rule that makes every other skip fail under CI.

A skip hides a test, so in CI (`CI=true`, which .ci/run sets) only the skips listed in EXPECTED may
happen: a missing reference (a download that failed, a tool or venv .ci/install should have made, a
device EMBER_TEST_DEVICES pins) turns into a failure there. Locally everything may skip, and every run
ends with a count of its skips per reason. tests/conftest.py and e2e/conftest.py register this module
as the plugin "ember-skips" (once per session).

Tests call `missing(reason)` where a reference is absent: it skips locally and fails under CI, with the
same message, so the rule is visible at the call site too.
"""
from __future__ import annotations

import collections
import os
import re

import pytest

CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

# (pattern matched against the skip reason, why this skip is expected even in CI). Keep it short.
EXPECTED = [
    # CI machines have no NVIDIA GPU; the CUDA kernels still run there through test_cuda_emulated.py
    (r"^no CUDA GPU to run the kernels on", "no GPU on CI: test_cuda_gpu.py needs a real CUDA device"),
    (r"^NCCL all-reduce needs 2\+ CUDA GPUs", "multi-GPU all-reduce needs 2+ CUDA GPUs"),
    # the inverse: the no-GPU error path cannot be observed where a GPU is present
    (r"^a CUDA GPU is present", "no-GPU behaviour is only observable without a GPU"),
    # WGSL has no 64-bit floats: dtype tests parametrized over every device skip float64 on webgpu
    (r"^webgpu has no float64 \(backend\.supports says so\)$", "WGSL has no f64"),
    # test_yolo compares each device against the cpu result; the cpu case of that parametrization is empty
    (r"^cpu is the reference here$", "device-vs-cpu test, cpu row"),
]
_EXPECTED = [re.compile(p) for p, _ in EXPECTED]

SKIPS: collections.Counter = collections.Counter()    # reason -> count, every skip this run
TURNED: collections.Counter = collections.Counter()   # reason -> count, skips CI turned into failures


def is_expected(reason: str) -> bool:
    return any(p.search(reason) for p in _EXPECTED)


def missing(reason: str) -> None:
    """A reference this test needs is absent: skip locally, fail under CI=true."""
    if CI:
        pytest.fail(f"{reason} (CI=true: a missing reference fails instead of skipping)", pytrace=False)
    pytest.skip(reason)


def _reason(rep) -> str:
    lr = rep.longrepr
    text = lr[2] if isinstance(lr, tuple) and len(lr) == 3 else str(lr)
    return text[len("Skipped: "):] if text.startswith("Skipped: ") else text


def _judge(rep) -> None:
    if not rep.skipped or hasattr(rep, "wasxfail"):
        return
    reason = _reason(rep)
    where = rep.longrepr[:2] if isinstance(rep.longrepr, tuple) else ("?", 0)
    if CI and not is_expected(reason):
        TURNED[reason] += 1
        rep.outcome = "failed"
        rep.longrepr = (f"{where[0]}:{where[1]}: skipped under CI=true for a reason not in "
                        f"tests/expected_skips.py EXPECTED: {reason}\n"
                        "A reference CI must have is missing (see .ci/install); if this skip is right on "
                        "every CI machine, add its reason to EXPECTED with a comment saying why.")
    else:
        SKIPS[reason] += 1


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _judge(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _judge(outcome.get_result())


def pytest_terminal_summary(terminalreporter):
    tr = terminalreporter
    if not SKIPS and not TURNED:
        tr.write_line(f"ember skips: none{' (CI=true)' if CI else ''}")
        return
    tr.section("ember skip summary (count per reason)")
    for reason, n in SKIPS.most_common():
        tag = "expected" if is_expected(reason) else "UNEXPECTED in CI"
        tr.write_line(f"{n:5d}  [{tag}] {reason[:200]}")
    for reason, n in TURNED.most_common():
        tr.write_line(f"{n:5d}  [FAILED: CI=true] {reason[:200]}")
