"""CLI arguments and inputs are checked before any model loads: a bad value is exit 2 with a message."""
import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize("argv,msg", [
    (["llama", "x", "-n", "-1"], "argument -n/--max-new-tokens: must be at least 1, got -1"),  # was exit 0
    (["llama", "x", "-n", "many"], "expected a positive integer, got 'many'"),
    (["whisper", "missing.wav"], "argument audio: no such file: missing.wav"),  # was: loaded 341 MB first
    (["whisper", "--beam", "0", "missing.wav"], "argument --beam: must be at least 1, got 0"),
])
def test_bad_arguments_exit_2_before_loading(argv, msg, tmp_path):
    # EMBER_CACHE points at an empty folder: had a model been loaded or fetched, the cache would not be empty
    env = {**os.environ, "EMBER_CACHE": str(tmp_path / "cache")}
    r = subprocess.run([sys.executable, "-m", "ember", *argv], capture_output=True, text=True, timeout=120,
                       cwd=tmp_path, env=env, check=False)
    assert r.returncode == 2, r.stderr
    assert msg in r.stderr
    assert not (tmp_path / "cache").exists()
