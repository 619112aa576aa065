"""Fuzz worker: `python worker.py FORMAT START COUNT SEED BASE.pkl OUT_DIR` (OUT_DIR "-": replay BASE["files"]). Runs inputs START.. of one format's
deterministic stream in this process, under an address-space cap (RLIMIT_AS) and a per-input limit on its CPU
seconds (SIGPROF: an input that spins is stopped, one the machine's load merely slows is not), and writes one line
per input to stdout before running it ("case i") and after ("done i OUTCOME"), so the parent can tell a crash (the process died inside case i) from the outcomes the worker saw itself:
    ok | ember (a clean ember.EmberError) | other (any other exception) | hang (over the CPU-time limit) |
    memory (MemoryError under the cap). Inputs whose outcome is other/hang/memory are saved to OUT_DIR."""
import os
import pickle
import random
import resource
import signal
import sys
import traceback
import warnings

sys.path.insert(0, os.path.dirname(__file__))

from formats import FORMATS  # noqa: E402

TIME_LIMIT_S = float(os.environ.get("FUZZ_TIME_LIMIT_S", "10"))
MEMORY_CAP = int(os.environ.get("FUZZ_MEMORY_CAP", str(1 << 30)))  # above what the worker holds at start


class Hang(BaseException):  # not an Exception: the code under test must not be able to swallow it
    pass


def _out_of_time(*_):
    raise Hang()


def _vm_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def main():
    fmt, start, count, seed, base_path, out_dir = sys.argv[1:7]
    start, count, seed = int(start), int(count), int(seed)
    with open(base_path, "rb") as f:
        base = pickle.load(f)
    load, gen = FORMATS[fmt]
    import ember  # noqa: F401  (imported before the cap: only the inputs are measured)
    warnings.simplefilter("ignore")  # zipfile's "Duplicate name" and the like: the outcome is what counts
    from ember.errors import EmberError
    try:  # warm up once (lazy imports, caches) with the unmutated input, then cap the address space
        load(base["valid"])
    except EmberError:
        pass
    resource.setrlimit(resource.RLIMIT_AS, (_vm_bytes() + MEMORY_CAP, resource.RLIM_INFINITY))
    signal.signal(signal.SIGPROF, _out_of_time)
    for i in range(start, start + count):
        if out_dir == "-":  # replaying saved reproducers: base_path's "files" holds them
            raw = base["files"][i]
        else:
            rng = random.Random(f"{fmt}:{seed}:{i}")  # each input reproducible on its own
            raw = gen(rng, base)
        print(f"case {i}", flush=True)
        outcome, detail = "ok", ""
        signal.setitimer(signal.ITIMER_PROF, TIME_LIMIT_S)
        try:
            load(raw)
        except EmberError as e:
            outcome = "ember" if str(e).startswith("ember: ") else "other"
            detail = "" if outcome == "ember" else f"message does not start with 'ember: ': {e}"
        except Hang:
            outcome = "hang"
        except MemoryError:
            outcome = "memory"
        except Exception as e:
            outcome, detail = "other", "".join(traceback.format_exception_only(type(e), e)).strip()
            detail += " @ " + "".join(traceback.format_tb(e.__traceback__)[-1:]).strip().replace("\n", " ")
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)
        if outcome not in ("ok", "ember") and out_dir != "-":
            with open(os.path.join(out_dir, f"{fmt}-{i}.bin"), "wb") as f:
                f.write(raw)
        print(f"done {i} {outcome} {detail[:400]!r}", flush=True)
    with open("/proc/self/status") as f:  # VmHWM: this process's peak RSS (ru_maxrss would carry the parent's)
        peak_kib = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    print(f"peak {peak_kib}", flush=True)


if __name__ == "__main__":
    main()
