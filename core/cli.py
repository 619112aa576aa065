"""The `ember` command (also `python -m ember`). Subcommands load their module only when used."""
from __future__ import annotations

import argparse
import importlib
import sys

from .errors import EmberError

# name -> (module providing add_parser(subparsers) and main(args), one-line help)
COMMANDS = {
    "info": ("ember.cli", "version, numpy, BLAS and the devices that work here (--env: the EMBER_* settings)"),
    "whisper": ("ember.models.whisper.cli", "transcribe a WAV file"),
    "llama": ("ember.models.llama.cli", "generate text with a Llama model"),
    "train-llama": ("ember.models.llama.cli", "train a small Llama on a text corpus"),
    "generate": ("ember.models.text.cli", "complete text with a language model (default: Gemma 3 270M)"),
    "chat": ("ember.models.text.cli", "chat with an instruct model (default: SmolLM2-135M-Instruct)"),
    "api": ("ember.models.text.cli", "an OpenAI-compatible server on 127.0.0.1 (chat, completions, embeddings)"),
    "finetune": ("ember.models.text.cli", "train LoRA adapters on a text file (PEFT's layout: peft loads them)"),
    "embed": ("ember.models.bert.cli", "sentence embeddings (default: all-MiniLM-L6-v2)"),
    "classify": ("ember.models.clip.cli", "classify an image (ViT, or CLIP zero-shot with --labels)"),
    "yolo": ("ember.models.yolo.cli", "detect objects in an image"),
    "segment": ("ember.models.sam.cli", "segment an object in an image with Segment Anything"),
    "onnx": ("ember.onnx.cli", "run an ONNX model on .npy inputs (cpu, webgpu, cuda)"),
    "convert": ("ember.convert", "convert weights between formats (ct2-whisper, yolo, gguf, safetensors)"),
    "serve": ("ember.wasm.serve", "build what is missing and serve the web app on 127.0.0.1"),
    "build-web": ("ember.wasm.serve", "write the static web app (deployable as a Hugging Face static Space)"),
}


DEVICE_HELP = ("cpu (default), auto (a GPU that beats the CPU if one works here, else cpu; the choice and "
               "why on stderr), webgpu or cuda")


def resolve_device(name: str) -> str:
    """A model command's --device as a device name. 'auto' is the honest choice: cuda when a CUDA GPU works,
    else a hardware WebGPU adapter, else the CPU (a software adapter such as lavapipe or SwiftShader is
    slower than ember's CPU backend, so auto never picks it); the choice and its reason go to stderr."""
    if name != "auto":
        return name
    from .device import device_status
    if device_status("cuda")[0]:
        print("ember: device auto -> cuda", file=sys.stderr, flush=True)
        return "cuda"
    from .webgpu.adapter_choice import auto_device
    chosen, why = auto_device()
    if chosen == "webgpu":
        from .device import device
        why = device("webgpu").backend.adapter.info
    print(f"ember: device auto -> {chosen} ({why})", file=sys.stderr, flush=True)
    return chosen


def add_parser(sub, name="info"):
    p = sub.add_parser("info", help=COMMANDS["info"][1])
    p.add_argument("--kernels", action="store_true",
                   help="the kernel registry: each fused op on cpu, webgpu and cuda -> the kernel that runs, or composed")
    p.add_argument("--env", action="store_true", help="list every EMBER_* environment variable with its current "
                   "value, default and meaning (docs/settings.md), instead of the rest")
    p.set_defaults(func=main_info)


def print_kernels():
    """`ember info --kernels`: the registry (ember.kernels), what runs for each op on each backend here."""
    from ember import kernels
    from ember.device import device, device_status
    here, notes = {}, []
    for name in kernels.BACKENDS:
        ok, why = device_status(name)
        notes.append(f"{name} {'available' if ok else 'unavailable'} ({why.split(';')[0][:70]})")
        if ok:
            here[name] = device(name).backend
    print("kernel registry (ember.kernels): each op, what runs on each backend; composed = its Tensor-op reference")
    print("devices: " + "; ".join(notes))
    width = max(len(b) for b in kernels.BACKENDS)
    for op, cells in kernels.table(here):
        print(op)
        for be in kernels.BACKENDS:
            print(f"  {be:<{width}}  {cells[be]}")
    return 0


def main_info(args=None):
    if args is not None and getattr(args, "kernels", False):
        return print_kernels()
    if getattr(args, "env", False):
        return main_info_env()
    import platform

    import numpy as np

    import ember
    print(f"ember {ember.__version__}")
    print(f"python {platform.python_version()} ({platform.machine()})")
    print(f"numpy {np.__version__}")
    try:
        from threadpoolctl import threadpool_info
        for lib in threadpool_info():
            if lib.get("user_api") == "blas":
                print(f"blas {lib.get('internal_api')} {lib.get('version')} kernel={lib.get('architecture')} "
                      f"threads={lib.get('num_threads')}")
    except ImportError:
        pass
    from ember.backends.cpu_matmul import NO_BLAS, matmul_path, native_kernels, native_kernels_status
    print(f"cpu matmul: {matmul_path()}")  # blas; in Pyodide wasm-simd128 or einsum (why)
    if not NO_BLAS:  # builds them on the first call (~1-4 s), as the first quantized matmul would
        print(f"cpu quantized kernels: {native_kernels_status()}")
        k = native_kernels()
        print(f"cpu kernel threads: {k.threads if k is not None else 1} (quantized matmuls and the decode step; "
              f"EMBER_NUM_THREADS sets it)")
    from ember.device import _NOT_DEVICES, _REGISTRY, device_status
    print("devices:")
    broken = 0
    for name in _REGISTRY:
        try:
            ok, why = device_status(name)  # False: its library or hardware is missing here
        except Exception:  # anything else is a bug in ember or the backend: show it and fail
            import traceback
            broken += 1
            print(f"  {name}: BROKEN (not a missing library or GPU; ember.devices() raises this):")
            print("    " + traceback.format_exc().rstrip().replace("\n", "\n    "))
            continue
        print(f"  {name}: {'available' if ok else 'unavailable'} ({why})")
    print("not device names (ember has no device aliases):")
    for name, hint in _NOT_DEVICES.items():
        print(f"  {name}: {hint}")
    return 1 if broken else 0


def main_info_env():
    """Each setting of ember.settings: its value here (or its default), what it accepts, when it is read, what it
    means. Exits 1 when one is set to a value it does not accept."""
    from . import settings
    bad = 0
    for scope, title in (("ember", "read by ember"), ("tests", "read by the test suite and CI, never by ember")):
        print(f"EMBER_* settings {title} (docs/settings.md):")
        for s, raw, error in settings.current():
            if s.scope == scope:
                bad += error is not None
                value = f"{s.default_text()} (unset: the default)" if raw is None else repr(raw)
                print(f"  {s.name} = {value}" + (f"  INVALID: not {s.accepts()}" if error else ""))
                print(f"      {s.meaning}; read {s.read}")
    return 1 if bad else 0


def build_parser(argv):
    parser = argparse.ArgumentParser(prog="ember", description="ember: tensors, models and a client-side web app")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = argv[0] if argv and argv[0] in COMMANDS else None
    mod_wanted = COMMANDS[wanted][0] if wanted else None
    if mod_wanted == "ember.cli":
        add_parser(sub)
    elif mod_wanted:
        try:
            m = importlib.import_module(mod_wanted)
        except ImportError as e:
            raise SystemExit(f"ember {wanted}: not available in this build ({e})")
        m.add_parser(sub)  # registers every command that module serves
    for name, (mod, help_) in COMMANDS.items():
        if mod != mod_wanted:  # placeholders keep `ember --help` complete without importing models
            sub.add_parser(name, help=help_, add_help=False)
    return parser


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 0
    func = getattr(args, "func", None)
    if func is None:
        parser.parse_args([args.command, "--help"])
        return 2
    from .backends.cpu_malloc import keep_freed_memory, no_huge_page_stalls
    keep_freed_memory()  # an application's choice, not the library's: EMBER_MALLOC_TUNING=0 opts out
    no_huge_page_stalls()
    try:
        return func(args) or 0
    except KeyboardInterrupt:
        return 130
    except (EmberError, ValueError, TypeError, OSError, RuntimeError, KeyError, MemoryError) as e:
        msg = str(e) if str(e).startswith("ember") else f"ember: {type(e).__name__}: {e}"
        print(msg, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
