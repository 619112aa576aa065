"""Every EMBER_* environment variable, in one table: name, type, default, when ember reads it, and what it means.

    from ember import settings
    settings.get("EMBER_NUM_THREADS")     # the typed value in the environment now, else the default
    settings.SETTINGS["EMBER_CACHE"].meaning

`get` reads the environment at each call; an empty value counts as unset, and one that does not parse raises
SettingError naming the variable and what it accepts. Where ember reads a variable once (the resource budget
when ember.limits is imported, a WebGPU backend's switches when the backend is made, the CPU kernels' when they
load), the `read` column says so: set those before that happens. The test suite's own variables (scope
"tests": ember never reads them; the tests and .ci do) are listed too, so one table names every EMBER_* there is.

`ember info --env` prints each with its current value; docs/settings.md renders this table (tests/test_settings.py
keeps the page equal to `markdown()`, and fails on an EMBER_* name in the sources that is not here).

Layer: base (imports nothing of ember but its errors).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from .errors import EmberError, SettingError


@dataclass(frozen=True)
class Setting:
    name: str
    kind: str            # "flag" (0 or 1), "int", "number" (an int or float, 1e8 allowed), "choice", "url", "path", "str"
    default: object      # the value get() returns when unset; None where ember computes it (shown says how)
    meaning: str         # one line
    read: str = "at each use"
    scope: str = "ember"  # "ember": read by ember; "tests": read by the test suite and CI only
    choices: tuple = ()
    low: int | None = None  # an "int" below this is refused
    high: int | None = None  # and above this
    shown: str = ""       # the default in words, where it is not a plain value

    def accepts(self) -> str:
        if self.kind == "flag":
            return "0 or 1"
        if self.kind == "int":
            if self.low is not None and self.high is not None:
                return f"an integer from {self.low} to {self.high}"
            return "an integer" + (f" >= {self.low}" if self.low is not None else "")
        if self.kind == "number":
            return "a number"
        if self.kind == "choice":
            return "one of " + ", ".join(self.choices)
        if self.kind == "url":
            return "an http:// or https:// URL"
        return "a path" if self.kind == "path" else "a string"

    def default_text(self) -> str:
        if self.shown:
            return self.shown
        if self.kind == "flag":
            return str(int(self.default))
        return "(unset)" if self.default is None else str(self.default)

    def parse(self, raw: str):
        """The typed value of `raw` (a non-empty string from the environment); SettingError if it does not parse."""
        value = _PARSE[self.kind](self, raw.strip())
        if value is None:
            raise SettingError(f"ember: ${self.name}={raw!r} is not {self.accepts()}; unset it for the default "
                               f"({self.default_text()}): {self.meaning}")
        return value


def _flag(s, raw):
    return {"0": False, "1": True}.get(raw)


def _int(s, raw):
    try:
        v = int(raw)
    except ValueError:
        return None
    return None if s.low is not None and v < s.low or s.high is not None and v > s.high else v


def _number(s, raw):
    try:  # an int setting takes "1e8" too (cast after float), as the budget always has
        return type(s.default)(float(raw))
    except (ValueError, OverflowError):
        return None


def _url(s, raw):
    return raw if raw.startswith(("http://", "https://")) else None


_PARSE = {"flag": _flag, "int": _int, "number": _number, "url": _url,
          "choice": lambda s, raw: raw if raw in s.choices else None,
          "path": lambda s, raw: raw, "str": lambda s, raw: raw}

_BUDGET = "once, when ember.limits is imported (and by each new Budget())"
_CPU_KERNELS = "once, when the CPU kernels first load"
_WEBGPU = "once per WebGPU backend, when it is made"
_WEBGPU_IMPORT = "once, when ember.webgpu.backend is imported"
_HTTP = "when the server is made"


def _budget(field: str, default, meaning: str) -> Setting:
    return Setting("EMBER_" + field.upper(), "number", default, meaning + f" (ember.limits.budget.{field})", _BUDGET)


_TABLE = [
    # ---------------------------------------------------------------- files and downloads
    Setting("EMBER_CACHE", "path", None, "the folder for downloads (ember.hub) and the native kernels ember builds",
            shown="$XDG_CACHE_HOME/ember, else ~/.cache/ember"),
    Setting("EMBER_HUB_ENDPOINT", "url", None, "the server a hub id `owner/name` resolves against",
            shown="$HF_ENDPOINT, else https://huggingface.co"),
    Setting("EMBER_HUB_DEADLINE", "number", 4 * 3600.0, "seconds one ember.hub download may take in all (the "
            ".part stays for the next call to resume)"),
    Setting("EMBER_HUB_STALL_BYTES", "int", 16 << 10, "an ember.hub download that receives fewer bytes than this "
            "in its `timeout` seconds has stalled and stops (the .part stays)", low=1),
    # ---------------------------------------------------------------- HTTP servers (ember serve, ember api: ember.httpd)
    Setting("EMBER_HTTP_MAX_CONNECTIONS", "int", 64, "connections `ember serve` and `ember api` serve at once (one "
            "more is answered 503 and closed)", _HTTP, low=1),
    Setting("EMBER_HTTP_HEADER_SECONDS", "number", 10.0, "seconds a client has from connecting to the end of its "
            "request's headers (`ember api`: and its body)", _HTTP),
    Setting("EMBER_HTTP_IDLE_SECONDS", "number", 30.0, "seconds one socket read or write may wait on the client (the "
            "model's time between two streamed tokens does not count)", _HTTP),
    Setting("EMBER_HTTP_MAX_REQUEST_LINE", "int", 8192, "bytes of a request line (`GET /path HTTP/1.1`); longer "
            "is a 414", _HTTP, low=64),
    # ---------------------------------------------------------------- CPU
    Setting("EMBER_MALLOC_TUNING", "flag", True, "0: keep_freed_memory() and no_huge_page_stalls() (the CLI, the "
            "benchmarks) leave glibc malloc and numpy's huge-page requests alone"),
    Setting("EMBER_NATIVE_KERNELS", "flag", True, "0: the CPU backend does not build or load its C kernels "
            "(numpy computes the same numbers, slower)", _CPU_KERNELS),
    Setting("EMBER_BLAS_POOL", "flag", True, "0: numpy's OpenBLAS keeps its own threads instead of running its jobs "
            "on the native CPU kernels' (whose spin then competes with them for the cores)", _CPU_KERNELS),
    Setting("EMBER_NUM_THREADS", "int", None, "threads of the native CPU kernels (quantized matmuls, the decode "
            "step; `ember info` prints the count; the page's are createEmber's threads)", _CPU_KERNELS,
            low=1, high=64, shown="the CPUs this process may run on, at most 8"),
    Setting("EMBER_BLOCKED_WEIGHT_BYTES", "int", 512 << 20, "bytes of float32 weights the native CPU backend may "
            "copy into blocks of 16 outputs (weights of up to 4096 outputs, a decode plan's layers): one-row "
            "products streamed 1.2-1.7x faster and split between threads, products of 2-2048 rows (an encoder's, a "
            "prompt's) from their second one on 5-50% faster (one copy a weight, the same bits); and 4-bit ONNX "
            "MatMulNBits weights as units of four rows for decode steps (1.2-1.7x faster from memory); the copies "
            "are memory beyond the model's; 0: never", low=0),
    Setting("EMBER_WASM_KERNELS", "flag", True, "0: under Pyodide, the CPU backend does not load its wasm SIMD "
            "kernels (numpy's einsum serves)", _CPU_KERNELS),
    Setting("EMBER_DETERMINISTIC", "flag", False, "1: float32 matmuls, GELU, SiLU and softmax run in the page's C "
            "kernels in the page's order, so the desktop gives the page's bits (set_deterministic(), `ember whisper "
            "--deterministic`)", "once, when ember's CPU matmul module is imported"),
    Setting("EMBER_KERNELS_OFF", "str", None, "kernel-registry ops that always run composed, comma-separated "
            "(attention,qmatmul; ember.kernels.disabled(...) does it for a block of code)",
            "once, when ember.kernels is imported", shown="(none)"),
    # ---------------------------------------------------------------- WebGPU
    Setting("EMBER_WEBGPU_POWER", "choice", "high-performance", "the adapter ember.webgpu asks for "
            "(ember.webgpu.backend.configure overrides it)", _WEBGPU_IMPORT,
            choices=("high-performance", "low-power")),
    Setting("EMBER_WEBGPU_BACKEND", "str", None, "native wgpu only: the adapter's backend by name (vulkan, metal, "
            "d3d12, gl), hardware first", _WEBGPU_IMPORT,
            shown="(unset: wgpu's choice)"),
    Setting("EMBER_WEBGPU_F16", "flag", True, "0: float16 is not stored natively even where the adapter has "
            "shader-f16 (packed or f32 words instead)", _WEBGPU),
    Setting("EMBER_WEBGPU_F16_COMPUTE", "flag", True, "0: float16 products are computed in f32 (1: in f16, "
            "widened into f32 sums)", _WEBGPU),
    Setting("EMBER_WEBGPU_PACK16", "flag", False, "1: bfloat16 (and float16 without shader-f16) stored two to a "
            "u32 word from the start (backend.set_pack16)", _WEBGPU),
    Setting("EMBER_WEBGPU_FUSE", "flag", True, "0: every elementwise op is its own dispatch (backend.fuse)",
            _WEBGPU),
    Setting("EMBER_WEBGPU_DECODE_FUSION", "flag", True, "0: a decode step's norm, q/k/v and attention fusions are "
            "off (backend.decode_fusion)", _WEBGPU),
    # ---------------------------------------------------------------- the resource budget for untrusted input
    _budget("load_factor", 4.0, "a weights file may materialise at most this many times its size, plus "
            "EMBER_LOAD_ALLOWANCE bytes"),
    _budget("load_allowance", 256 << 20, "bytes a weights file may materialise beyond EMBER_LOAD_FACTOR x its size"),
    _budget("pickle_depth", 200, "nesting of tuples, lists and dicts in a .pt pickle"),
    _budget("pickle_work", 1 << 24, "nodes hashing a .pt pickle's dict keys and set members walks, each "
            "reference to a shared tuple counted again"),
    _budget("max_pixels", 50_000_000, "pixels of an image, refused before the frame is decoded (decoding holds "
            "at most 8 bytes a pixel: 400 MB at the default)"),
    _budget("min_sample_rate", 1_000, "a WAV file's lowest sample rate (Hz)"),
    _budget("max_sample_rate", 384_000, "a WAV file's highest sample rate (Hz)"),
    _budget("max_channels", 64, "a WAV file's channels"),
    _budget("max_audio_seconds", 6 * 3600.0, "seconds of audio in a WAV file"),
    _budget("max_context", 1 << 20, "positions a config may ask for (context length, max_position_embeddings, "
            "n_ctx)"),
    _budget("max_vocab", 1 << 22, "a config's vocabulary size"),
    _budget("max_layers", 1024, "a config's layers"),
    _budget("max_width", 1 << 17, "a config's hidden or intermediate size, heads"),
    _budget("max_tokens", 1 << 20, "tokenizer.json padding and truncation lengths"),
    _budget("max_regex_chars", 4096, "characters of a tokenizer's pre-tokenizer regex"),
    _budget("max_regex_states", 200_000, "states of a regex run in linear time (a tokenizer's costly pattern, ONNX "
            "RegexFullMatch), counted repeats unrolled"),
    _budget("max_normalized_growth", 64, "characters a tokenizer's normalizers may make per input character "
            "(plus 1,024)"),
    _budget("template_chars", 4 << 20, "characters a chat template's render may output (also the largest string or "
            "list it may build; ember.jinja's sandbox)"),
    _budget("template_steps", 20_000_000, "evaluation steps of one chat-template render"),
    _budget("template_seconds", 10.0, "seconds of one chat-template render"),
    _budget("grammar_states", 20_000, "automaton states a structured-output grammar (ember.grammar: a JSON schema or "
            "regex) may compile to"),
    _budget("grammar_seconds", 20.0, "seconds a structured-output grammar may take to compile"),
    _budget("max_tensor_bytes", 8 << 30, "bytes of an ONNX tensor whose size the model's data decides"),
    _budget("max_loop_iterations", 1 << 20, "iterations of an ONNX Loop"),
    # ---------------------------------------------------------------- the test suite and CI (ember never reads these)
    Setting("EMBER_TEST_DEVICES", "str", None, "the devices the `device` fixture runs on, comma-separated; a pinned "
            "device that does not work fails (.ci/run pins cpu,webgpu)", scope="tests",
            shown="ember.devices()"),
    Setting("EMBER_FUZZ_N", "int", 2000, "inputs per format of tests/test_fuzz_formats.py", scope="tests", low=1),
    Setting("EMBER_FUZZ_SEED", "int", 17, "the seed of tests/test_fuzz_formats.py's mutations", scope="tests"),
    Setting("EMBER_FUZZ_REPORT", "path", None, "where tests/test_fuzz_formats.py writes its JSON report",
            scope="tests"),
    Setting("EMBER_SOAK", "flag", False, "1: tests/test_soak.py runs the full soak (1,000 Llama generations, "
            "50 Whisper, 60 YOLO)", scope="tests"),
    Setting("EMBER_SOAK_REPORT", "path", None, "where tests/test_soak.py writes its memory series as JSON",
            scope="tests"),
    Setting("EMBER_WEBGPU_F16_TINY", "flag", False, "1: tests/test_webgpu_f16_models.py also runs the real "
            "Whisper tiny.en in float16 (minutes on lavapipe)", scope="tests"),
]
SETTINGS: dict[str, Setting] = {s.name: s for s in _TABLE}


_UNSET = object()


def get(name: str, default=_UNSET):
    """The typed value of environment variable `name` now; when it is unset (or empty) `default`, else the
    setting's own default. SettingError on a value the setting does not accept."""
    s = SETTINGS.get(name)
    if s is None:
        raise EmberError(f"ember: {name} is not a setting of ember (ember.settings.SETTINGS lists them all)")
    raw = os.environ.get(name)
    if raw:
        return s.parse(raw)
    return s.default if default is _UNSET else default


def current() -> list[tuple[Setting, str | None, SettingError | None]]:
    """[(setting, its value in the environment or None when unset, the error that value raises or None)]."""
    out = []
    for s in _TABLE:
        raw, error = os.environ.get(s.name) or None, None
        try:
            if raw is not None:
                s.parse(raw)
        except SettingError as e:
            error = e
        out.append((s, raw, error))
    return out


def markdown() -> str:
    """The table as docs/settings.md shows it: one markdown table per scope."""
    parts = []
    for scope, title in (("ember", "Read by ember"), ("tests", "Read by the test suite and CI")):
        rows = ["| variable | accepts | default | read | meaning |", "|---|---|---|---|---|"]
        for s in _TABLE:
            if s.scope == scope:
                rows.append(f"| `{s.name}` | {s.accepts()} | {_cell(s.default_text())} | {s.read} | "
                            f"{_cell(s.meaning)} |")
        parts.append(f"### {title}\n\n" + "\n".join(rows))
    return "\n\n".join(parts) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")
