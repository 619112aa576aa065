"""Saving (issue #17): a save replaces the file only once written, keeps the old file's mode and owner,
writes through a symlink to its target, removes temp files a killed save left behind, and names the real
destination when it fails. Every format's save goes through one atomic_write."""
import os
import signal
import stat
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ember

FORMATS = [".safetensors", ".npz", ".pt", ".gguf"]
T = {"w": ember.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))}


def _same(path):
    np.testing.assert_array_equal(ember.load(path)["w"].numpy(), T["w"].numpy())


@pytest.mark.parametrize("ext", FORMATS)
def test_resave_keeps_the_mode(ext, tmp_path):
    p = tmp_path / f"m{ext}"
    ember.save(T, p)
    os.chmod(p, 0o600)
    ember.save(T, p)
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o600
    _same(p)


def test_resave_keeps_the_owner(tmp_path):
    """As root the old file's owner is given to the new one; anyone else owns what they write (and may keep
    the group, which the save also tries)."""
    p = tmp_path / "m.safetensors"
    ember.save(T, p)
    owner = (12345, 23456) if os.geteuid() == 0 else (os.getuid(), os.getgid())
    os.chown(p, *owner)
    ember.save(T, p)
    assert (os.stat(p).st_uid, os.stat(p).st_gid) == owner


@pytest.mark.parametrize("ext", FORMATS)
def test_save_through_a_symlink_writes_its_target(ext, tmp_path):
    target = tmp_path / "store" / f"real{ext}"
    target.parent.mkdir()
    ember.save({"w": ember.zeros(1)}, target)
    link = tmp_path / f"link{ext}"
    link.symlink_to(target)
    ember.save(T, link)
    assert link.is_symlink() and os.readlink(link) == str(target)
    _same(target)


def test_a_killed_save_leaves_nothing_behind_the_next_save(tmp_path):
    p = tmp_path / "m.safetensors"
    code = textwrap.dedent(f"""
        import os, signal, ember
        from ember.io.formats import atomic_write
        with atomic_write({str(p)!r}) as f:
            f.write(b"partial")
            os.kill(os.getpid(), signal.SIGKILL)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, check=False)
    assert r.returncode == -signal.SIGKILL
    orphans = [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
    assert len(orphans) == 1 and orphans[0].startswith("m.safetensors.")  # what SIGKILL leaves (no cleanup runs)
    ember.save(T, p)
    assert sorted(os.listdir(tmp_path)) == ["m.safetensors"]
    _same(p)


def test_a_live_saves_temp_file_is_left_alone(tmp_path):
    p = tmp_path / "m.safetensors"
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        busy = tmp_path / f"m.safetensors.{other.pid}.tmp"  # another process's save in progress
        busy.write_bytes(b"x")
        ember.save(T, p)
        assert busy.exists()
    finally:
        other.kill()
        other.wait()


@pytest.mark.parametrize("ext", FORMATS)
def test_save_into_a_missing_folder_names_the_destination(ext, tmp_path):
    p = tmp_path / "nope" / f"m{ext}"
    with pytest.raises(FileNotFoundError) as e:
        ember.save(T, p)
    assert str(p) in str(e.value) and ".tmp" not in str(e.value)


def test_a_failed_write_keeps_the_old_file_and_names_the_destination(tmp_path):
    p = tmp_path / "m.safetensors"
    ember.save(T, p)
    (tmp_path / f"m.safetensors.{os.getpid()}.tmp").mkdir()  # the temp file cannot be created, even by root
    with pytest.raises(OSError) as e:
        ember.save({"w": ember.zeros(1)}, p)
    assert str(e.value).startswith(f"ember: cannot save {p}") and ".tmp" not in str(e.value)
    _same(p)


@pytest.mark.parametrize("ext", FORMATS)
def test_a_full_disk_names_the_destination_and_keeps_the_old_file(ext, tmp_path, monkeypatch):
    # the temp file is /dev/full, which the kernel answers with ENOSPC: before, a bare "[Errno 28] No space
    # left on device" that named no file
    import errno
    from ember.io import formats
    p = tmp_path / f"m{ext}"
    ember.save(T, p)
    real_open = open
    monkeypatch.setattr(formats, "open", lambda path, mode="r", *a, **k: real_open("/dev/full", mode, *a, **k),
                        raising=False)
    big = {"w": ember.tensor(np.ones((256, 1024), np.float32))}  # 1 MB: past any write buffer
    with pytest.raises(OSError) as e:
        ember.save(big, p)
    assert e.value.errno == errno.ENOSPC
    assert str(e.value) == f"ember: cannot save {p}: No space left on device"
    monkeypatch.undo()
    _same(p)


def test_a_file_size_limit_mid_write_names_the_destination(tmp_path):
    # a real partial write (RLIMIT_FSIZE: EFBIG after 64 KB) in a child: the old file stays whole
    p = tmp_path / "m.safetensors"
    ember.save(T, p)
    code = textwrap.dedent(f"""
        import resource, signal, numpy as np, ember
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, 1 << 16))
        try:
            ember.save({{"w": ember.tensor(np.ones((1024, 1024), np.float32))}}, {str(p)!r})
        except OSError as e:
            print(e.errno, e)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == f"27 ember: cannot save {p}: File too large", r.stdout
    _same(p)
    assert [q.name for q in tmp_path.iterdir()] == ["m.safetensors"]


@pytest.mark.parametrize("ext", FORMATS)
@pytest.mark.parametrize("value", [3, "text", [1.0, 2.0], None, {"a": 1}, object()], ids=lambda v: type(v).__name__)
def test_a_value_that_is_not_a_tensor_is_an_ember_error(ext, value, tmp_path):
    with pytest.raises(ember.errors.SaveError, match=r"ember: tensor 'bad' is a \w+; expected an ember Tensor"):
        ember.save({"w": T["w"], "bad": value}, tmp_path / f"m{ext}")
    assert not (tmp_path / f"m{ext}").exists()


@pytest.mark.parametrize("path,what", [("m.bin", "ember writes"), ("m", "ember writes"), ("m.SAFETENSORS.x", "ember writes")])
def test_an_unknown_extension_or_a_non_dict_is_an_ember_error(path, what, tmp_path):
    from ember.errors import EmberError
    with pytest.raises(ember.errors.SaveError, match=what):
        ember.save(T, tmp_path / path)
    with pytest.raises(EmberError, match="expected a dict of name -> tensor, got a list"):
        ember.save([T["w"]], tmp_path / "m.safetensors")
    # still the TypeError / ValueError older callers caught
    with pytest.raises(ValueError):
        ember.save(T, tmp_path / path)
    with pytest.raises(TypeError):
        ember.save({"x": 3}, tmp_path / "m.npz")
