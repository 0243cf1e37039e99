"""Backend selection (cpu or cuda) and the CUDA device.

The backend is chosen once, lazily: ``FEARLESS_BACKEND`` (via Config) or ``set_backend()`` wins;
otherwise cuda when cuda.core imports, a driver answers and GPU 0 has compute capability 8.0 or
newer, else cpu. Probing never raises: the reason cuda is unusable is kept for ``fearless doctor``.
"""
from __future__ import annotations

import functools
import threading

from fearless.config import CONFIG
from fearless.errors import BackendError
from fearless.tracebacks import user_facing

MIN_COMPUTE_CAPABILITY = (8, 0)
_BACKENDS = ("cpu", "cuda")
_chosen: str | None = CONFIG.backend
_thread = threading.local()  # .device: the Device made current on this thread


@functools.lru_cache(maxsize=1)
def cuda_probe() -> tuple[bool, str]:
    """``(usable, detail)``: whether GPU 0 can run fearless kernels, and why not or which GPU."""
    try:
        from cuda.core import Device
        dev = Device(0)
        cc = tuple(dev.compute_capability)
        name = dev.name
    except Exception as exc:  # no driver, no GPU, broken install: all mean "no cuda backend"
        return False, f"no usable CUDA driver or GPU ({type(exc).__name__}: {exc})"
    if cc < MIN_COMPUTE_CAPABILITY:
        return False, (f"{name} has compute capability {cc[0]}.{cc[1]}; fearless needs "
                       f"{MIN_COMPUTE_CAPABILITY[0]}.{MIN_COMPUTE_CAPABILITY[1]} (Ampere) or newer")
    return True, f"{name}, compute capability {cc[0]}.{cc[1]}"


def driver_version() -> tuple[int, int] | None:
    """The CUDA version the installed driver supports, ``(major, minor)``, or None."""
    try:
        from cuda.bindings import driver
        (err,) = driver.cuInit(0)
        err, version = driver.cuDriverGetVersion()
    except Exception:  # no libcuda: no driver
        return None
    return None if int(err) != 0 else (version // 1000, version % 1000 // 10)


def current_backend() -> str:
    """``"cuda"`` or ``"cpu"``; decided on first call unless set explicitly."""
    global _chosen
    if _chosen is None:
        _chosen = "cuda" if cuda_probe()[0] else "cpu"
    return _chosen


@user_facing
def set_backend(name: str) -> None:
    """Select ``"cpu"`` or ``"cuda"`` for tensors and launches created from now on.

    Raises ValueError for another name and BackendError when cuda is asked for but unusable.
    """
    global _chosen
    if name not in _BACKENDS:
        raise ValueError(f"unknown backend {name!r}; expected one of {_BACKENDS}")
    if name == "cuda":
        ok, why = cuda_probe()
        if not ok:
            raise BackendError(f"the cuda backend is unusable: {why}",
                               help="run `fearless doctor`, or use the cpu backend")
    _chosen = name


def cuda_device():
    """The cuda.core Device for GPU 0, made current on the calling thread on its first use
    there (each allocation asks: probing and making it current every time cost ~2 us).
    Raises BackendError."""
    dev = getattr(_thread, "device", None)
    if dev is None:
        ok, why = cuda_probe()
        if not ok:
            raise BackendError(f"the cuda backend is unusable: {why}",
                               help="run `fearless doctor`")
        from cuda.core import Device
        dev = Device(0)
        dev.set_current()
        _thread.device = dev
    return dev


def multiprocessor_count() -> int:
    """Streaming multiprocessors (SMs) of the current backend's device: GPU 0's count on the
    cuda backend (132 on an H200), for sizing grids in waves of blocks; 1 on the cpu backend,
    which runs one block after another."""
    if current_backend() != "cuda":
        return 1
    return cuda_device().properties.multiprocessor_count


def cuda_arch() -> str:
    """The GPU's ``sm_XY`` target name, for example ``"sm_90"`` on an H100/H200."""
    major, minor = cuda_device().compute_capability
    return f"sm_{major}{minor}"
