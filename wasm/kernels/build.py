"""Build the CPU backend's WebAssembly SIMD128 kernels from core/backends/cpu_kernels/*.c, as two modules, each twice:

    python -m ember.wasm.kernels.build            # (re)write core/backends/cpu_{wasm,pool}_kernels{,_relaxed}.wasm
    python -m ember.wasm.kernels.build --check    # rebuild into a temp dir; exit 1 if the committed bytes differ

cpu_wasm_kernels.wasm, a Pyodide side module (Pyodide's own memory, one thread: serial.c), and cpu_pool_kernels.wasm,
the page's kernel pool (the same kernels with pool.c, over a shared memory it imports, instantiated in every worker
by web/pool.js: cpu_pool.py). Each is plain SIMD128, and *_relaxed.wasm is the same sources with -mrelaxed-simd (the
GEMM's multiply-add becomes f32x4.relaxed_madd, a fused FMA where the CPU has one), loaded only where the browser
validates relaxed SIMD (cpu_wasm_kernels.py; the pool follows the side module's choice, so both give the same bits).

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

from ember.backends.cpu_pool import POOL_MODULE, POOL_RELAXED_MODULE  # package data of ember.backends
from ember.backends.cpu_wasm_kernels import MODULE, RELAXED_MODULE

# the sources are package data of ember.backends, beside the module that loads them (and the native build)
HERE = MODULE.parent / "cpu_kernels"
ONLY = {"threads.c": "native", "pool.c": "pool", "serial.c": "side",  # parallel.h's three builds
        "gemm_exact.c": "pool",  # (deterministic mode's GEMM in the relaxed pool module)
        # native only: a half-weight LM head, greedy's screened pick from a float32 head (on the first) and the
        # float GEMM of encoders (the page runs the heads and the GEMM on its pool)
        "matvec_f16.c": "native", "argmax_f32.c": "native", "gemm_native.c": "native"}
CLANG, LLD = "clang-19", "wasm-ld-19"  # Debian bookworm: apt-get install clang-19 lld-19
# A Pyodide side module (a wasm with a dylink.0 section): emscripten's target ABI, no libc, SIMD128.
# -ffreestanding keeps host headers out; -mbulk-memory lets clang's memset/memcpy be instructions; -ffp-contract=off:
# no multiply-add fused (relaxed SIMD has a fused one), so q8dot.c rounds as its native build and numpy do.
FLAGS = ["--target=wasm32-unknown-emscripten", "-ffreestanding", "--sysroot=/nonexistent", "-msimd128",
         "-mbulk-memory", "-O3", "-ffp-contract=off", "-fPIC", "-shared", "-nostdlib", "-fuse-ld=lld", "-Wall", "-Wextra",
         "-Werror",
         "-Wl,--experimental-pic", "-Wl,--no-entry", "-Wl,--export-dynamic"]
# each shipped module and the flags it adds to FLAGS
VARIANTS = {MODULE: [], RELAXED_MODULE: ["-mrelaxed-simd"]}
# The pool's module: no Pyodide ABI, a memory it imports (shared: its maximum is wasm32's 4 GiB, which engines
# reserve as address space only), atomics, and the stack pointer exported so that web/pool.js gives each worker's
# instance its own stack (the caller keeps the 1 MiB one linked here).
POOL_FLAGS = ["--target=wasm32-unknown-unknown", "-ffreestanding", "--sysroot=/nonexistent", "-msimd128",
              "-mbulk-memory", "-matomics", "-O3", "-ffp-contract=off", "-nostdlib", "-fuse-ld=lld", "-Wall",
              "-Wextra", "-Werror", "-Wl,--no-entry", "-Wl,--import-memory", "-Wl,--shared-memory",
              "-Wl,--max-memory=4294967296", "-Wl,-z,stack-size=1048576", "-Wl,--export=__stack_pointer",
              "-Wl,--export=__heap_base"]
POOL_VARIANTS = {POOL_MODULE: [], POOL_RELAXED_MODULE: ["-mrelaxed-simd"]}


class KernelBuildError(RuntimeError):
    pass


def sources(kind: str = "side") -> list[Path]:
    """The C files of the side module ("side") or the pool's ("pool")."""
    return sorted(p for p in HERE.glob("*.c") if ONLY.get(p.name, kind) == kind)


def compiler() -> str | None:
    """clang-19 when it and its wasm linker are installed, else None."""
    clang = shutil.which(CLANG)
    return clang if clang and shutil.which(LLD) else None


def build(out: str | Path = MODULE, target: Path = MODULE) -> Path:
    """Compile the module `target` (a key of VARIANTS or POOL_VARIANTS) into `out`; build it under target's file
    name, which the module's name section records."""
    clang = compiler()
    if clang is None:
        raise KernelBuildError(f"ember: building the wasm kernels needs {CLANG} and {LLD} "
                               f"(Debian: apt-get install clang-19 lld-19)")
    out = Path(out)
    # relative source names, run from HERE: nothing of the checkout's location enters the module
    pool = target in POOL_VARIANTS
    extra = POOL_VARIANTS[target] if pool else VARIANTS[target]
    cmd = [clang, *(POOL_FLAGS if pool else FLAGS), *extra, "-o", str(out.resolve()),
           *(s.name for s in sources("pool" if pool else "side"))]
    proc = subprocess.run(cmd, cwd=HERE, capture_output=True, text=True)
    if proc.returncode != 0:
        raise KernelBuildError(f"ember: {' '.join(cmd)} failed:\n{proc.stderr}")
    return out


def check() -> str | None:
    """None when fresh builds equal the committed modules, else what differs."""
    problems = []
    with tempfile.TemporaryDirectory(prefix="ember-kernels-") as tmp:
        for target in {**VARIANTS, **POOL_VARIANTS}:
            fresh = build(Path(tmp) / target.name, target).read_bytes()
            if not target.is_file():
                problems.append(f"{target} is missing; run python -m ember.wasm.kernels.build")
            elif fresh != target.read_bytes():
                problems.append(f"{target} differs from a fresh build of core/backends/cpu_kernels/*.c ({target.stat().st_size} "
                                f"vs {len(fresh)} bytes); run python -m ember.wasm.kernels.build and commit it")
    return "\n".join(problems) or None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="compare a fresh build with the committed module")
    args = p.parse_args(argv)
    if args.check:
        problem = check()
        print(problem or f"{', '.join(t.name for t in {**VARIANTS, **POOL_VARIANTS})}: up to date")
        return 1 if problem else 0
    for target in {**VARIANTS, **POOL_VARIANTS}:
        print(f"wrote {build(target, target)} ({target.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
