"""Shared pytest setup: the device list every parity test is parametrized over, and the skip rule.

Devices: `EMBER_TEST_DEVICES=cpu,webgpu` pins the list (CI does): every test parametrized over `device`
runs on exactly those, and fails -- not skips -- on one that is unavailable here. Without the variable
the list is `ember.devices()`, the devices that work on this machine (`ember info` says why others don't).

Skips: expected_skips.py (registered below) fails every skip under CI=true whose reason it does not list,
and prints a count of skips per reason at the end of every run.
"""
from __future__ import annotations

import os

import pytest

import expected_skips


def _devices():
    want = os.environ.get("EMBER_TEST_DEVICES")
    if want:
        return [d.strip() for d in want.split(",") if d.strip()], True
    import ember
    return ember.devices(), False


DEVICES, PINNED = _devices()
_STATUS: dict = {}  # device name -> (available, description or reason)


def _status(name):
    if name not in _STATUS:
        from ember.device import device_status
        _STATUS[name] = device_status(name)
    return _STATUS[name]


def pytest_configure(config):
    if not config.pluginmanager.has_plugin("ember-skips"):
        config.pluginmanager.register(expected_skips, "ember-skips")


def pytest_generate_tests(metafunc):
    if "device" in metafunc.fixturenames:
        metafunc.parametrize("device", DEVICES)


@pytest.fixture(autouse=True)
def _pinned_device_is_present(request):
    """With EMBER_TEST_DEVICES set, a test on a device that does not work here fails."""
    callspec = getattr(request.node, "callspec", None)
    if PINNED and callspec is not None and "device" in callspec.params:
        name = callspec.params["device"]
        ok, why = _status(name)
        if not ok:
            pytest.fail(f"EMBER_TEST_DEVICES={os.environ['EMBER_TEST_DEVICES']} pins '{name}', "
                        f"which is unavailable here: {why}", pytrace=False)


def pytest_report_header(config):
    how = "pinned by EMBER_TEST_DEVICES" if PINNED else "ember.devices()"
    lines = [f"ember test devices ({how}): {', '.join(DEVICES)}"]
    if PINNED:
        lines += [f"  {d}: UNAVAILABLE ({_status(d)[1]}): its tests will fail" for d in DEVICES if not _status(d)[0]]
    lines.append(f"CI={'true' if expected_skips.CI else 'unset'}: "
                 + ("skips not in tests/expected_skips.py fail" if expected_skips.CI else "any skip is allowed"))
    return lines


@pytest.fixture
def rng():
    import numpy as np
    return np.random.default_rng(0)


@pytest.fixture(scope="module")
def one_torch_thread():
    """torch's tiny ops wait on a busy machine's second thread (seconds a step); one thread keeps them fast. A test
    module takes it with `pytestmark = pytest.mark.usefixtures("one_torch_thread")`."""
    import torch
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
