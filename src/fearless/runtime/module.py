"""PTX -> cubin -> a loaded kernel function, through cuda.core.

``ptx_to_cubin`` uses nvJitLink (``cuda.core.Program(ptx, "ptx")``), which needs no GPU, so cubins
can be built ahead of time. ``load`` turns a cubin (or, when nvJitLink is missing, the PTX, which
the driver then compiles) into a ``LoadedKernel`` with the compiled function's resource facts.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from fearless.errors import BackendError


def ptx_to_cubin(ptx: str, arch: str, name: str) -> bytes:
    """Assemble PTX for ``arch`` (``"sm_90"``). Raises BackendError naming the kernel."""
    try:
        from cuda.core import Program, ProgramOptions
        obj = Program(ptx, "ptx", ProgramOptions(arch=arch, name=name)).compile("cubin")
    except Exception as exc:
        raise BackendError(f"kernel '{name}': PTX -> cubin failed for {arch}: {exc}",
                           help="run `fearless doctor`; nvJitLink comes from the "
                                "nvidia-nvjitlink wheel") from None
    return bytes(obj.code)


@functools.lru_cache(maxsize=1)
def nvjitlink_version() -> str:
    """The nvJitLink version string, or "unavailable" (part of the JIT cache key)."""
    try:
        from cuda.bindings import nvjitlink
        major, minor = nvjitlink.version()
        return f"{major}.{minor}"
    except Exception:
        return "unavailable"


@dataclass
class LoadedKernel:
    """A kernel function loaded on the current device, with its compiled resource usage."""

    name: str
    handle: object               # cuda.core Kernel
    registers: int               # per thread
    max_threads_per_block: int   # what the registers and shared memory allow
    static_shared_bytes: int
    params: object = None        # dispatch.ParamBuffer: the packed kernel parameters
    direct: bool = True          # launch through cuLaunchKernel (False: through cuda.core)


def _attr(attrs, name: str) -> int:
    # cuda.core 1.2.0 exposes kernel attributes as properties, later releases as methods
    value = getattr(attrs, name)
    return int(value() if callable(value) else value)


def load(name: str, cubin: bytes | None, ptx: str) -> LoadedKernel:
    """Load ``cubin`` (or JIT ``ptx`` in the driver when cubin is None) and query the function."""
    from cuda.core import ObjectCode
    from fearless.runtime.device import cuda_device

    cuda_device()
    try:
        obj = ObjectCode.from_cubin(cubin) if cubin is not None else ObjectCode.from_ptx(ptx)
        kernel = obj.get_kernel(name)
        attrs = kernel.attributes
        return LoadedKernel(name, kernel, _attr(attrs, "num_regs"),
                            _attr(attrs, "max_threads_per_block"),
                            _attr(attrs, "shared_size_bytes"))
    except Exception as exc:
        raise BackendError(f"kernel '{name}': loading the compiled module failed: {exc}",
                           help="run `fearless doctor`") from None
