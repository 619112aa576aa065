"""The app with device "auto" (its default) in Chromium, whose only WebGPU adapter here is SwiftShader
(a fallback adapter): the page runs on the CPU and its device note says why, naming the software
adapter; choosing WebGPU still works (e2e/test_web_webgpu.py runs the models there)."""
from __future__ import annotations

from web_app import App


def test_auto_uses_cpu_on_a_software_adapter_and_says_why(playwright_session, server):
    a = App(playwright_session, f"{server.url}?device=auto")
    try:
        note = a.page.inner_text("#device-note") if not a.page.is_hidden("#device-note") else ""
        if a.page.input_value("#device") == "webgpu":   # a hardware adapter in this browser: nothing to explain
            assert note == ""
        else:
            assert a.page.input_value("#device") == "cpu"
            assert "software renderer" in note and "force" in note, note
            for tool in ("whisper", "llama", "yolo"):  # and each tool says what runs it, on which adapter, why
                line = a.page.inner_text(f"#picker-{tool} .device-line")
                assert line.startswith("Runs on the CPU") and "not WebGPU because" in line and "adapter: " in line, line
        assert not a.errors, a.errors
    finally:
        a.close()
