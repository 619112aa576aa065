"""The real Gemma 3 270M GGUF for the tests that need it: fetched once into ember's cache (sha256-checked),
a CI failure / local skip (expected_skips.missing) when it cannot be had."""
from expected_skips import missing


def gemma3_gguf():
    from ember.models.gemma3.fetch import fetch_gemma3_270m
    try:
        return fetch_gemma3_270m()
    except OSError as e:  # no network and nothing cached
        missing(f"Gemma 3 270M GGUF not fetched: {e}")
