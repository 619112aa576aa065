"""Where ember keeps files of its own: one cache folder for downloads (ember.hub) and for what is built on this
machine (the native CPU kernels).

    cache_dir("hub")    # $EMBER_CACHE, else $XDG_CACHE_HOME/ember, else ~/.cache/ember; joined with the parts
"""
from __future__ import annotations

import os
from pathlib import Path

from . import settings


def cache_dir(*parts: str) -> Path:
    """$EMBER_CACHE, else $XDG_CACHE_HOME/ember, else ~/.cache/ember; joined with `parts` (not created)."""
    root = settings.get("EMBER_CACHE")
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME")
        root = os.path.join(xdg, "ember") if xdg else os.path.join(os.path.expanduser("~"), ".cache", "ember")
    return Path(root).joinpath(*parts)
