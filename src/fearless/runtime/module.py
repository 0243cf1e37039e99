"""PTX -> cubin -> a loaded kernel function, through cuda.core.

``ptx_to_cubin`` uses nvJitLink (``cuda.core.Program(ptx, "ptx")``), which needs no GPU, so cubins
can be built ahead of time. ``load`` turns a cubin (or, when nvJitLink is missing, the PTX, which
the driver then compiles) into a ``LoadedKernel`` with the compiled function's resource facts;
``load_rebuilding`` compiles code from the disk cache once more when the driver refuses it.
"""
from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass

from fearless.errors import BackendError, CacheWarning, ToolchainWarning
from fearless.tracebacks import user_stacklevel


def ptx_to_cubin(ptx: str, arch: str, name: str) -> bytes:
    """Assemble PTX for ``arch`` (``"sm_90"``). Raises BackendError naming the kernel; warns
    (ToolchainWarning, once) when the nvJitLink in use is one known to miscompile."""
    _warn_if_old_nvjitlink()
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


# nvJitLink 13.0 (CUDA 13.0's, as on a toolkit without the pip wheel) drops the sign extension
# after a 16-bit negation: fl.i64(-x) of an i16 x = -32768 gave +32768 on an H200 (driver 580),
# where 13.5 (the wheel pip installs) is right (fuzz seeds 5545 and 53488,
# tests/backends/test_nvjitlink.py). Its SASS drops it after abs.s16 too (read with nvdisasm).
GOOD_NVJITLINK = (13, 5)


def nvjitlink_problem() -> str | None:
    """Why the nvJitLink in use cannot be trusted, or None (also None when none is found)."""
    v = nvjitlink_version()
    if v == "unavailable" or tuple(int(p) for p in v.split(".")) >= GOOD_NVJITLINK:
        return None
    good = ".".join(map(str, GOOD_NVJITLINK))
    return (f"nvJitLink {v} miscompiles 16-bit negation (-x of an i16 -32768 sign-extends to "
            f"+32768); pip install 'nvidia-nvjitlink>={good}' (a toolkit's older copy was "
            f"found first)")


@functools.lru_cache(maxsize=1)
def _warn_if_old_nvjitlink() -> None:
    problem = nvjitlink_problem()
    if problem:
        warnings.warn(problem, ToolchainWarning, stacklevel=user_stacklevel())


@dataclass
class LoadedKernel:
    """A kernel function loaded on the current device, with its compiled resource usage."""

    name: str
    handle: object               # cuda.core Kernel
    registers: int               # per thread
    max_threads_per_block: int   # what the registers and shared memory allow
    static_shared_bytes: int
    params: object = None        # pack.ParamBuffer: the packed kernel parameters
    pooled_shared: int = 0       # static shared bytes moved to dynamic (llvm/shared_pool.py)

    @property
    def function(self) -> int:
        """The CUkernel address, which ``cuLaunchKernel`` takes in place of a CUfunction."""
        return int(self.handle.handle)


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


def load_rebuilding(name: str, compiled, rebuild, load_one):
    """``(compiled, load_one(compiled))``; when the driver refuses code read from the disk cache
    (``compiled.from_cache``: built by another toolchain, or for another driver), warn
    (``CacheWarning``) and load ``rebuild()``, a fresh compile that replaces the entry, instead.
    Raises the BackendError of fresh code the driver refuses."""
    try:
        return compiled, load_one(compiled)
    except BackendError as exc:
        if not compiled.from_cache:
            raise
        warnings.warn(f"fearless: kernel '{name}': the driver refused the code in the JIT cache "
                      f"({exc.reason}); compiling it again", CacheWarning,
                      stacklevel=user_stacklevel())
    fresh = rebuild()
    return fresh, load_one(fresh)


def allow_dynamic_shared(loaded: LoadedKernel, nbytes: int) -> None:
    """Let ``loaded`` take up to ``nbytes`` of dynamic shared memory per block: needed above
    48 KB (``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES``; CUDA C Programming Guide,
    "Shared Memory", opt-in above 48 KB). Raises BackendError when the driver refuses."""
    from cuda.bindings import driver

    from fearless.runtime.device import cuda_device

    attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    handle = loaded.handle.handle
    if isinstance(handle, driver.CUkernel):  # cuda.core loads through the library API
        (err,) = driver.cuKernelSetAttribute(attr, nbytes, handle,
                                             driver.CUdevice(cuda_device().device_id))
    else:
        (err,) = driver.cuFuncSetAttribute(handle, attr, nbytes)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise BackendError(f"kernel '{loaded.name}': the driver refused {nbytes} bytes of "
                           f"dynamic shared memory per block ({err})",
                           help="lower the contract's dynamic_shared maximum")


def param_layout(loaded: LoadedKernel) -> list[tuple[int, int]]:
    """``(offset, size)`` in bytes of each parameter of the loaded entry, as the driver lays
    them out (``cuKernelGetParamInfo``, CUDA 12.4+; the ``cuFunc`` form for a CUfunction). The
    count comes from ``cuKernelGetParamCount`` where the driver has it (newer than
    ``ParamInfo``), else from the first index ``ParamInfo`` calls invalid. Raises BackendError
    naming the kernel."""
    from cuda.bindings import driver

    handle = loaded.handle.handle
    kernel = isinstance(handle, driver.CUkernel)
    info_of = driver.cuKernelGetParamInfo if kernel else driver.cuFuncGetParamInfo
    ok, invalid = driver.CUresult.CUDA_SUCCESS, driver.CUresult.CUDA_ERROR_INVALID_VALUE
    try:
        err, count = (driver.cuKernelGetParamCount if kernel else driver.cuFuncGetParamCount)(
            handle)
        count = count if err == ok else None
    except Exception:  # a driver without the call: cuda.bindings cannot find its symbol
        count = None
    layout = []
    while count is None or len(layout) < count:
        err, offset, size = info_of(handle, len(layout))
        if err == invalid and count is None:
            break
        if err != ok:
            raise BackendError(f"kernel '{loaded.name}': the driver cannot describe the "
                               f"entry's parameters ({err})",
                               help="fearless needs a CUDA 12.4+ driver")
        layout.append((int(offset), int(size)))
    return layout
