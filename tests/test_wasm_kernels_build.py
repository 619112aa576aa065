"""The committed wasm kernel module is what clang-19 builds from wasm/kernels/*.c, and a valid side module."""
import pytest

from expected_skips import missing
from ember.wasm.kernels import build


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    if build.compiler() is None:
        missing(f"ember: {build.CLANG} / {build.LLD} not installed (.ci/install installs them)")
    # (the output file name is recorded in the module's name section: build under the shipped one)
    return build.build(tmp_path_factory.mktemp("kernels") / build.TARGET.name).read_bytes()


def test_committed_module_equals_a_fresh_build(fresh):
    assert build.check() is None
    assert fresh == build.TARGET.read_bytes()


def test_module_is_a_pyodide_side_module_exporting_the_kernels(fresh):
    assert fresh[:8] == b"\0asm\1\0\0\0"
    # the first section is the custom "dylink.0" one emscripten's dlopen needs
    assert fresh[8] == 0 and fresh[10:19] == b"\x08dylink.0"
    for name in (b"ember_sgemm", b"ember_sgemm_batched", b"ember_sgemm_scratch_floats", b"ember_silu_f32",
                 b"ember_gelu_f32", b"ember_exp_rowmax_f32"):
        assert name in fresh


def test_a_failing_compile_names_the_command(tmp_path, monkeypatch, fresh):
    (tmp_path / "bad.c").write_text("int f(void) { return undefined_symbol; }\n")
    monkeypatch.setattr(build, "HERE", tmp_path)
    with pytest.raises(build.KernelBuildError, match=r"clang-19 .*bad\.c failed:\n.*undefined_symbol"):
        build.build(tmp_path / "out.wasm")
