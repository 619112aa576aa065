"""What the app's page says about a run, for the tests that walk through it (test_web_app_use.py,
test_web_app_keep.py): the heading of its message, and waits for a message or a progress text."""
from __future__ import annotations

import json

from web_app import RUN_S

WAIT = RUN_S * 1000


def heading(app) -> str:
    return "" if app.page.is_hidden("#message") else app.page.inner_text("#message .head")


def wait_message(app):
    app.page.wait_for_selector("#message:not([hidden])", timeout=WAIT)


def wait_progress(app, pattern: str):
    app.page.wait_for_function(f"new RegExp({json.dumps(pattern)}).test(document.querySelector('#progress-text').textContent)",
                               timeout=WAIT)
