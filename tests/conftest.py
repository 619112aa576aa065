"""Shared pytest setup: the device list every parity test is parametrized over."""
from __future__ import annotations

import os

import pytest


def _devices():
    """cpu always; webgpu / cuda when their library and an adapter are present (EMBER_TEST_DEVICES overrides)."""
    want = os.environ.get("EMBER_TEST_DEVICES")
    if want:
        return [d.strip() for d in want.split(",") if d.strip()]
    import ember
    return ember.devices()


DEVICES = _devices()


def pytest_generate_tests(metafunc):
    if "device" in metafunc.fixturenames:
        metafunc.parametrize("device", DEVICES)


def pytest_report_header(config):
    return f"ember test devices: {', '.join(DEVICES)}"


@pytest.fixture
def rng():
    import numpy as np
    return np.random.default_rng(0)
