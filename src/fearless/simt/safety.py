"""``fearless.unsafe()``: the one switch that allows what fearless cannot prove safe.

On the host, ``with fl.unsafe():`` allows ``kernel.launch_raw`` (a launch without the contract
checks). Inside a kernel, ``with fl.unsafe():`` allows shared-memory writes at computed indices,
reads of other threads' slots without a proven barrier, barriers under thread-dependent
conditions and any access to an ``UnsafeSlice``; the cpu backend's race detector
(on unless ``FEARLESS_RACECHECK=0``) then checks those accesses while the kernel runs.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager

_state = threading.local()


@contextmanager
def unsafe():
    """Allow operations that fearless cannot prove safe (see the module docstring)."""
    depth = getattr(_state, "depth", 0)
    _state.depth = depth + 1
    try:
        yield
    finally:
        _state.depth = depth


def in_unsafe() -> bool:
    return getattr(_state, "depth", 0) > 0
