"""Honest device choice: `auto` never picks a software WebGPU adapter (fallback, SwiftShader, llvmpipe /
lavapipe, WARP): it uses the CPU and says why, while "webgpu" still forces the adapter; `ember info`
shows the adapter's vendor/architecture and key limits. Natively here the adapter is lavapipe."""
from __future__ import annotations

import asyncio
import contextlib
import io
from concurrent.futures import ThreadPoolExecutor

import pytest

import ember
from ember.device import device_status
from ember.webgpu.adapter_choice import auto_device, describe, software_reason

_OK, _WHY = device_status("webgpu")


@pytest.mark.parametrize("details,software", [
    ({"vendor": "nvidia", "architecture": "ada", "device": "NVIDIA GeForce RTX 4090", "adapter_type": "DiscreteGPU"}, False),
    ({"vendor": "apple", "architecture": "metal-3", "description": ""}, False),
    ({"vendor": "intel", "architecture": "gen-12lp", "fallback": False}, False),
    ({"vendor": "google", "architecture": "swiftshader", "description": "SwiftShader Device (Subzero)"}, True),
    ({"vendor": "llvmpipe", "device": "llvmpipe (LLVM 15.0.6, 256 bits)", "adapter_type": "CPU"}, True),
    ({"vendor": "mesa", "device": "lavapipe"}, True),
    ({"description": "Microsoft Basic Render Driver"}, True),
    ({"vendor": "", "architecture": "", "fallback": True}, True),      # the browser's own flag wins
    ({"vendor": "someone", "device": "Some GPU", "adapter_type": "CPU"}, True),
])
def test_software_reason_by_flag_type_and_name(details, software):
    why = software_reason(details)
    assert (why is not None) == software, (details, why)
    if software:
        assert "software" in why or "CPU" in why


def test_describe_names_vendor_architecture_limits_and_auto():
    d = describe({"vendor": "nvidia", "architecture": "hopper", "device": "NVIDIA H100", "backend_type": "Vulkan",
                  "adapter_type": "DiscreteGPU"},
                 {"max-buffer-size": 1 << 32, "max-storage-buffer-binding-size": 1 << 31,
                  "max-compute-workgroup-storage-size": 32768, "max-compute-invocations-per-workgroup": 1024},
                 {"shader-f16"})
    for part in ("NVIDIA H100", "nvidia / hopper", "max buffer 4 GiB", "max storage binding 2 GiB",
                 "workgroup storage 32 KiB", "invocations/workgroup 1024", "shader-f16"):
        assert part in d, (part, d)
    assert "auto" not in d   # hardware: no note
    assert "'auto' uses the CPU" in describe({"device": "SwiftShader Device"}, {}, set())


def _run(coro):
    """asyncio.run in a thread: Playwright (e2e, same pytest process) keeps a loop in the main thread."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


needs_webgpu = pytest.mark.skipif(not _OK, reason=f"webgpu unavailable: {_WHY}")


@needs_webgpu
def test_auto_follows_the_adapter_here_and_webgpu_still_forces_it():
    from ember.wasm.worker_api import pick_device
    be = ember.device("webgpu").backend
    name, why = auto_device()
    auto = _run(pick_device("auto"))
    forced = _run(pick_device("webgpu"))
    assert forced["device"] == "webgpu" and forced["adapter"] == be.description
    if be.adapter.software is None:   # a hardware adapter (a real GPU machine)
        assert (name, why) == ("webgpu", "") and auto["device"] == "webgpu"
    else:                             # lavapipe / llvmpipe here
        assert name == "cpu" and be.adapter.software in why and "'webgpu' forces it" in why
        assert auto["device"] == "cpu" and be.adapter.software in auto["reason"]
        assert auto["adapter"] == be.description
    with pytest.raises(Exception, match="expected 'auto', 'webgpu' or 'cpu'"):
        _run(pick_device("tpu"))


@needs_webgpu
def test_ember_info_shows_adapter_details():
    from ember.cli import main
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["info"])
    line = next(ln for ln in out.getvalue().splitlines() if ln.strip().startswith("webgpu:"))
    ad = ember.device("webgpu").backend.adapter
    assert ad.details["device"] in line
    assert "max storage binding" in line and "invocations/workgroup" in line
    assert ("software renderer" in line) == (ad.software is not None)
