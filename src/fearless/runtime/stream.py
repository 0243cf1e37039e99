"""Streams: where launches and copies are enqueued, and where deferred errors surface.

A fearless Stream wraps a cuda.core Stream (cuda backend) or nothing (cpu backend, where work is
synchronous). Launches register *deferred checks* on their stream (reading the bounds-error
word of a launch, for example); ``synchronize()`` waits for the device and then runs them, so a
``KernelBoundsError`` surfaces at the next synchronisation on both backends alike.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import sys
from typing import Callable

from fearless.runtime import device, ownership
from fearless.tracebacks import user_facing


class Stream:
    """An ordered queue of GPU work. ``handle`` is the CUstream as an int (0 for cpu)."""

    def __init__(self, core=None):
        self.core = core
        self._deferred: list[Callable[[], None]] = []

    @property
    def handle(self) -> int:
        return 0 if self.core is None else int(self.core.handle)

    def defer(self, check: Callable[[], None]) -> None:
        """Run ``check`` after the next synchronisation of this stream (it may raise)."""
        self._deferred.append(check)

    def synchronize(self) -> None:
        """Wait for all enqueued work, then run the deferred checks (first error wins)."""
        if self.core is not None:
            self.core.sync()
        checks, self._deferred = self._deferred, []
        for check in checks:
            check()

    def __cuda_stream__(self):
        return (0, self.handle)


_current: dict[str, Stream] = {}


@atexit.register
def _report_at_exit() -> None:
    """An error a kernel recorded (an out-of-bounds read) surfaces at the next synchronisation;
    a program that ends without one would never hear of it, so say it on stderr at exit, and
    end the process with status 1 (the program's results are not to be trusted).

    An atexit hook cannot change the exit status except by ending the process itself, so it
    calls ``os._exit(1)`` after flushing stdout and stderr: exit hooks registered before
    fearless was imported and the interpreter's final cleanup do not run then. A program that
    already ended with an uncaught exception keeps its status and its cleanup.
    """
    failed = False
    for stream in list(_current.values()):
        if not stream._deferred:
            continue
        try:
            stream.synchronize()
        except Exception as exc:  # noqa: BLE001 - reported, the process is ending anyway
            failed = True
            print(f"fearless: at exit, an error from a kernel that was never synchronised:\n"
                  f"{type(exc).__name__}: {exc}", file=sys.stderr)
    if failed and getattr(sys, "last_value", None) is None:
        for f in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                f.flush()
        os._exit(1)


def current_stream() -> Stream:
    """The stream of the current backend that launches and copies go to.

    On cuda it is the device's default stream (the legacy one, so work is ordered with PyTorch's
    and CuPy's default streams without extra events).
    """
    backend = device.current_backend()
    stream = _current.get(backend)
    if stream is None:
        core = device.cuda_device().default_stream if backend == "cuda" else None
        stream = _current[backend] = Stream(core)
    return stream


@user_facing
def synchronize() -> None:
    """Wait for the current stream and raise any deferred kernel error (``KernelBoundsError``).

    Raises LaunchError inside a running DeviceOperation (a ``.then()`` callback)."""
    ownership.refuse_while_executing("fl.synchronize()")
    current_stream().synchronize()
