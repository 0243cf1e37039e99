"""Compiling for GPUs that are not here: the archs a cpu-backend compile also targets.

Two sources, read by both kernel tracks at the first launch of each specialisation:

* ``FEARLESS_CROSS_COMPILE=sm_80,sm_90`` (``config.py``): kernels still run on the cpu backend,
  and each specialisation it compiles is also compiled to a cubin for every listed arch (the
  GPU path: LLVM -> PTX -> nvJitLink, or Tile IR -> tileiras), so a GPU-compile failure raises
  at the launch that caused it. CI sets it for the whole test suite; no GPU is needed.
* ``compile_only(archs)`` (``fearless compile``): kernel launches compile for ``archs`` into the
  disk cache and run nothing; what was compiled is listed.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager

from fearless.config import Config

_STATE = threading.local()


def archs(config: Config) -> tuple[str, ...]:
    """The GPU archs that a cpu-backend compile also compiles for: ``compile_only``'s inside
    it (what ``fearless compile --arch`` asked for), else ``config``'s (FEARLESS_CROSS_COMPILE)."""
    return getattr(_STATE, "archs", ()) or config.cross_compile


def compiling_ahead() -> bool:
    """True inside ``compile_only``: kernels compile but do not run (examples skip checks)."""
    return bool(getattr(_STATE, "archs", ()))


def compile_each(kernel, types: tuple, constants: dict, targets, build) -> None:
    """``build(arch)`` for every arch of ``targets``, each compile noted for ``fearless compile``
    to list. A failure keeps its type and gains a note naming the kernel, its specialisation
    and the arch (the test that launched it fails with it)."""
    made = getattr(_STATE, "made", None)
    for arch in targets:
        try:
            compiled = build(arch)
        except Exception as exc:
            how = "fearless compile" if compiling_ahead() else "FEARLESS_CROSS_COMPILE"
            exc.add_note(f"while compiling kernel '{kernel.name}' for {arch} ({how}), parameter "
                         f"types ({', '.join(map(str, types))}); it runs on the cpu backend")
            raise
        if made is not None and not any(c is compiled for *_, c in made):
            made.append((kernel, types, constants, arch, compiled))


@contextmanager
def compile_only(targets):
    """Within this block kernel launches compile for the GPU ``targets`` (e.g. ``["sm_90"]``)
    and run nothing. Yields the list of ``(kernel, types, constants, arch, Compiled)`` made.
    Needs nvJitLink (SIMT) and tileiras (tile kernels), not a GPU."""
    saved = getattr(_STATE, "archs", ()), getattr(_STATE, "made", None)
    _STATE.archs, _STATE.made = tuple(targets), []
    try:
        yield _STATE.made
    finally:
        _STATE.archs, _STATE.made = saved
