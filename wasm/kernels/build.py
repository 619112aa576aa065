"""Build the CPU backend's WebAssembly SIMD128 kernels: every wasm/kernels/*.c into one Pyodide side module.

    python -m ember.wasm.kernels.build            # (re)write core/backends/cpu_wasm_kernels.wasm
    python -m ember.wasm.kernels.build --check    # rebuild into a temp dir; exit 1 if the committed bytes differ

The module is committed and shipped as package data of ember.backends, so `pip install` needs no
compiler and the wheel stays py3-none-any. clang-19's output is byte-for-byte reproducible (no paths
or timestamps in a freestanding build without debug info), so CI rebuilds it and compares: a kernel
source changed without rebuilding fails there (tests/test_wasm_kernels_build.py).
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ember.backends.cpu_wasm_kernels import MODULE as TARGET  # package data of ember.backends

HERE = Path(__file__).resolve().parent
CLANG, LLD = "clang-19", "wasm-ld-19"  # Debian bookworm: apt-get install clang-19 lld-19
# A Pyodide side module (a wasm with a dylink.0 section): emscripten's target ABI, no libc, SIMD128.
# -ffreestanding keeps host headers out; -mbulk-memory lets clang's memset/memcpy be instructions.
FLAGS = ["--target=wasm32-unknown-emscripten", "-ffreestanding", "--sysroot=/nonexistent", "-msimd128",
         "-mbulk-memory", "-O3", "-fPIC", "-shared", "-nostdlib", "-fuse-ld=lld", "-Wall", "-Wextra", "-Werror",
         "-Wl,--experimental-pic", "-Wl,--no-entry", "-Wl,--export-dynamic"]


class KernelBuildError(RuntimeError):
    pass


def sources() -> list[Path]:
    return sorted(HERE.glob("*.c"))


def compiler() -> str | None:
    """clang-19 when it and its wasm linker are installed, else None."""
    clang = shutil.which(CLANG)
    return clang if clang and shutil.which(LLD) else None


def build(out: str | Path = TARGET) -> Path:
    clang = compiler()
    if clang is None:
        raise KernelBuildError(f"ember: building the wasm kernels needs {CLANG} and {LLD} "
                               f"(Debian: apt-get install clang-19 lld-19)")
    out = Path(out)
    # relative source names, run from HERE: nothing of the checkout's location enters the module
    cmd = [clang, *FLAGS, "-o", str(out.resolve()), *(s.name for s in sources())]
    proc = subprocess.run(cmd, cwd=HERE, capture_output=True, text=True)
    if proc.returncode != 0:
        raise KernelBuildError(f"ember: {' '.join(cmd)} failed:\n{proc.stderr}")
    return out


def check() -> str | None:
    """None when a fresh build equals the committed module, else what differs."""
    with tempfile.TemporaryDirectory(prefix="ember-kernels-") as tmp:
        fresh = build(Path(tmp) / TARGET.name).read_bytes()
    if not TARGET.is_file():
        return f"{TARGET} is missing; run python -m ember.wasm.kernels.build"
    if fresh != TARGET.read_bytes():
        return (f"{TARGET} differs from a fresh build of wasm/kernels/*.c "
                f"({TARGET.stat().st_size} vs {len(fresh)} bytes); run python -m ember.wasm.kernels.build and commit it")
    return None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="compare a fresh build with the committed module")
    args = p.parse_args(argv)
    if args.check:
        problem = check()
        print(problem or f"{TARGET.name}: up to date")
        return 1 if problem else 0
    print(f"wrote {build()} ({TARGET.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
