"""The committed wasm kernel modules (plain and relaxed SIMD) are what clang-19 builds from core/backends/cpu_kernels/*.c,
and valid side modules."""
import pytest

from expected_skips import missing
from ember.wasm.kernels import build


RELAXED_MADD = b"\xfd\x85\x02"  # f32x4.relaxed_madd's opcode (0xfd prefix, LEB128 0x105)


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """{shipped module path: bytes of a fresh build}"""
    if build.compiler() is None:
        missing(f"ember: {build.CLANG} / {build.LLD} not installed (.ci/install installs them)")
    tmp = tmp_path_factory.mktemp("kernels")
    # (the output file name is recorded in the module's name section: build under the shipped one)
    return {t: build.build(tmp / t.name, t).read_bytes() for t in build.VARIANTS}


def test_committed_modules_equal_a_fresh_build(fresh, monkeypatch):
    assert set(fresh) == {build.MODULE, build.RELAXED_MODULE}
    for target, data in fresh.items():
        assert data == target.read_bytes(), target
    monkeypatch.setattr(build, "VARIANTS", {})  # the side modules were just compared: check() builds the pool's
    assert build.check() is None


def test_a_stale_module_fails_the_check(fresh, tmp_path, monkeypatch):
    stale = tmp_path / build.RELAXED_MODULE.name
    stale.write_bytes(fresh[build.RELAXED_MODULE][:-1])
    monkeypatch.setattr(build, "VARIANTS", {stale: ["-mrelaxed-simd"]})  # one build, not all four again
    monkeypatch.setattr(build, "POOL_VARIANTS", {})
    problem = build.check()
    assert problem is not None and problem.startswith(f"{stale} differs from a fresh build") and "\n" not in problem


@pytest.mark.parametrize("relaxed", [False, True])
def test_modules_are_pyodide_side_modules_exporting_the_kernels(fresh, relaxed):
    data = fresh[build.RELAXED_MODULE if relaxed else build.MODULE]
    assert data[:8] == b"\0asm\1\0\0\0"
    # the first section is the custom "dylink.0" one emscripten's dlopen needs
    assert data[8] == 0 and data[10:19] == b"\x08dylink.0"
    for name in (b"ember_sgemm", b"ember_sgemm_batched", b"ember_sgemm_scratch_floats", b"ember_silu_f32",
                 b"ember_gelu_f32", b"ember_exp_rowmax_f32", b"ember_qmatmul", b"ember_qdequant"):
        assert name in data
    # only the relaxed module uses relaxed_madd (the GEMM's multiply-adds), so only it needs the probe
    assert (RELAXED_MADD in data) == relaxed


def test_a_failing_compile_names_the_command(tmp_path, monkeypatch, fresh):
    (tmp_path / "bad.c").write_text("int f(void) { return undefined_symbol; }\n")
    monkeypatch.setattr(build, "HERE", tmp_path)
    with pytest.raises(build.KernelBuildError, match=r"clang-19 .*bad\.c failed:\n.*undefined_symbol"):
        build.build(tmp_path / "out.wasm")
