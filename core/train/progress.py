"""A progress bar for training loops: tqdm when it is installed, else one line on stderr rewritten in
place (a terminal) or printed at each tenth (a log file). Silent in the page, where there is no stderr to
watch (the page gets each step through its callback instead)."""
from __future__ import annotations

import sys
import time


class _Line:
    def __init__(self, total, desc, file):
        self.total, self.desc, self.file, self.n = total, desc, file, 0
        self.tty = hasattr(file, "isatty") and file.isatty()
        self.t0, self.post, self._tenth = time.perf_counter(), "", -1

    def set_postfix(self, **kv):
        self.post = " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in kv.items())

    def update(self, n=1):
        self.n += n
        tenth = int(10 * self.n / self.total) if self.total else 0
        if self.tty or tenth != self._tenth:
            self._tenth = tenth
            self._draw("\r" if self.tty else "", "" if self.tty else "\n")

    def _draw(self, start, end):
        secs = time.perf_counter() - self.t0
        rate = self.n / secs if secs > 0 else 0.0
        pct = f"{100 * self.n / self.total:3.0f}% " if self.total else ""
        self.file.write(f"{start}{self.desc}: {pct}{self.n}/{self.total or '?'} [{secs:.1f}s, {rate:.1f} it/s] {self.post}{end}")
        self.file.flush()

    def close(self):
        if self.tty:
            self.file.write("\n")
            self.file.flush()


class _Silent:
    def set_postfix(self, **kv):
        pass

    def update(self, n=1):
        pass

    def close(self):
        pass


def progress_bar(total: int | None, desc: str = "", enabled: bool = True, file=None):
    """An object with update(n), set_postfix(**metrics) and close()."""
    if not enabled or sys.platform == "emscripten":
        return _Silent()
    file = file or sys.stderr
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _Line(total, desc, file)
    return tqdm(total=total, desc=desc, file=file, leave=True, dynamic_ncols=True)
