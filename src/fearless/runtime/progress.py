"""The one line a slow compile prints on stderr, so a long first call does not look hung.

    fearless: compiling kernel 'sgemm' (array<f32, 2d, read>, ...) for cpu ... done in 6.2 s

The first half appears once the compile has run for ``THRESHOLD`` seconds (from a timer thread),
the second when it ends; a compile that ends sooner prints nothing. ``FEARLESS_PROGRESS=0``
(``Config.progress``) silences it.
"""
from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager

THRESHOLD = 1.0  # seconds
_LOCAL = threading.local()


@contextmanager
def quiet():
    """No compile line from this thread inside this block (the autotuner's parallel compiles
    print one line for all of them)."""
    saved = getattr(_LOCAL, "quiet", False)
    _LOCAL.quiet = True
    try:
        yield
    finally:
        _LOCAL.quiet = saved


def quiet_here() -> bool:
    """Whether this thread is inside ``quiet()``."""
    return getattr(_LOCAL, "quiet", False)


@contextmanager
def compiling(what: str, enabled: bool = True, threshold: float | None = None):
    """Report the compile that runs inside this block (``what``: "kernel 'k' (...) for cpu")
    when it takes ``threshold`` seconds or more (default ``THRESHOLD``)."""
    if not enabled:
        yield
        return
    threshold = THRESHOLD if threshold is None else threshold
    start = time.perf_counter()
    lock = threading.Lock()
    shown = False

    def show():
        nonlocal shown
        with lock:
            if not shown:
                shown = True
                _write(f"fearless: compiling {what} ...")

    timer = threading.Timer(threshold, show)
    timer.daemon = True
    timer.start()
    ok = False
    try:
        yield
        ok = True
    finally:
        timer.cancel()
        elapsed = time.perf_counter() - start
        if elapsed >= threshold:
            show()  # the timer may not have run yet on a busy machine
        with lock:
            if shown:
                _write(f" {'done in' if ok else 'failed after'} {elapsed:.1f} s\n")


def _write(text: str) -> None:
    stream = sys.stderr
    if stream is not None:  # pythonw and some embedders have no stderr
        stream.write(text)
        stream.flush()
