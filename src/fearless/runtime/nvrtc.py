"""CUDA C++ -> PTX with NVRTC (``cuda.bindings.nvrtc``), for ``fl.foreign.cuda``.

NVRTC needs no GPU and no driver: it is a library (``libnvrtc.so``, from the
``nvidia-cuda-nvrtc`` wheel, the ``fearless[foreign]`` extra, or a CUDA toolkit; cuda.bindings
finds it through cuda.pathfinder). cuda.core's ``Program(source, "c++")`` would do the same but
asks the driver whether it can load the PTX, so it fails on a machine without one; calling
NVRTC directly keeps compiling (and the entry check that follows) testable anywhere.
"""
from __future__ import annotations

import functools

from fearless.errors import BackendError, CompileError

_HELP = "pip install nvidia-cuda-nvrtc (the fearless[foreign] extra), or install a CUDA toolkit"


@functools.lru_cache(maxsize=1)
def unavailable() -> str | None:
    """Why NVRTC cannot be used here, or None when it can (its library loads)."""
    try:
        from cuda.bindings import nvrtc
        err, _, _ = nvrtc.nvrtcVersion()
    except Exception as exc:  # no cuda.bindings, or no libnvrtc: both mean "no NVRTC"
        return f"NVRTC is not installed ({type(exc).__name__}: {exc})"
    return None if int(err) == 0 else f"NVRTC does not answer ({err})"


def version() -> str:
    """NVRTC's version, ``"13.5"``; call only when ``unavailable()`` is None."""
    from cuda.bindings import nvrtc
    _, major, minor = nvrtc.nvrtcVersion()
    return f"{major}.{minor}"


def to_ptx(kernel: str, source: str, arch: str, options: tuple = ()) -> str:
    """Compile CUDA C++ ``source`` to PTX for ``arch`` (``"sm_90"``, ``"sm_90a"``: NVRTC's
    ``compute_90``/``compute_90a`` virtual architecture), with NVRTC ``options`` added (for
    example ``"-I/path"``, ``"--use_fast_math"``). Raises BackendError when NVRTC is missing,
    CompileError (naming ``kernel``, with NVRTC's log) when the source does not compile."""
    problem = unavailable()
    if problem:
        raise BackendError(f"kernel '{kernel}': compiling CUDA C++ needs NVRTC; {problem}",
                           help=_HELP)
    from cuda.bindings import nvrtc
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), f"{kernel}.cu".encode(), 0, [], [])
    _check(kernel, nvrtc, err, "nvrtcCreateProgram")
    try:
        opts = [f"--gpu-architecture={arch.replace('sm_', 'compute_')}".encode(),
                *(o.encode() for o in options)]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            log = _text(nvrtc, prog, nvrtc.nvrtcGetProgramLogSize, nvrtc.nvrtcGetProgramLog)
            raise CompileError(f"NVRTC could not compile the CUDA source for {arch}:\n"
                               f"{log.strip()}", kernel=kernel)
        return _text(nvrtc, prog, nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _text(nvrtc, prog, size_of, read) -> str:
    _, size = size_of(prog)
    buffer = b" " * size
    read(prog, buffer)
    return buffer.rstrip(b"\0").decode(errors="replace")


def _check(kernel: str, nvrtc, err, call: str) -> None:
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise BackendError(f"kernel '{kernel}': {call} failed with {err}", help=_HELP)
