"""``fearless doctor``: one line per requirement, each OK or what to do about it.

The last line is the backend kernels will run on. Exit status 1 when something the cpu backend
needs is missing, or when the backend asked for (``FEARLESS_BACKEND=cuda``) cannot run kernels.
"""
from __future__ import annotations

import platform
import sys

from fearless.config import CONFIG


def _python():
    ok = sys.version_info >= (3, 10)
    return ok, f"Python {platform.python_version()}" + ("" if ok else ": fearless needs 3.10+")


def _llvm():
    try:
        from fearless.backends.llvm.ptx import _target_machine, llvm_version
        _target_machine("sm_80")
        return True, f"llvmlite with LLVM {llvm_version()}, NVPTX target available"
    except Exception as exc:
        return False, f"llvmlite's NVPTX target is unusable ({exc}); pip install -U llvmlite"


def _libdevice():
    try:
        from fearless.backends.llvm.nvvm import libdevice_path
        return True, f"libdevice: {libdevice_path()}"
    except Exception as exc:
        return False, f"{exc}; math functions will not compile (pip install nvidia-nvvm)"


def _nvjitlink():
    from fearless.runtime.module import nvjitlink_problem, nvjitlink_version
    v = nvjitlink_version()
    if v == "unavailable":
        return False, ("nvJitLink not found: PTX -> cubin falls back to the driver's JIT "
                       "(pip install nvidia-nvjitlink)")
    problem = nvjitlink_problem()
    if problem:
        return False, f"PTX -> cubin: {problem}"
    return True, f"PTX -> cubin: nvJitLink {v}"


def _tileiras():
    try:
        from fearless.backends.tileir import tileiras
        tc = tileiras.find()
    except Exception as exc:  # a broken install: say what is wrong, the SIMT track still works
        return False, f"tileiras: {exc}"
    if tc is None:
        return False, ("tileiras not found: tile kernels run on the cpu backend, or on a GPU "
                       "from cubins made by `fearless compile` (pip install 'fearless[tile]')")
    versions = ", ".join(f"{a}.{b}" for a, b in tc.versions())
    return True, f"tile kernels: {tc.fingerprint()} at {tc.tileiras} (bytecode {versions})"


def _nvrtc():
    from fearless.runtime import nvrtc
    why = nvrtc.unavailable()
    if why is not None:
        return False, (f"{why}: fl.foreign.cuda cannot compile CUDA C++ (fl.foreign.ptx and "
                       f".cubin still work; pip install 'fearless[foreign]')")
    from cuda.bindings import nvrtc as lib
    _, major, minor = lib.nvrtcVersion()
    return True, f"CUDA C++ for fl.foreign.cuda: NVRTC {major}.{minor}"


def _cuda_asked_for() -> bool:
    """Whether ``FEARLESS_BACKEND=cuda`` chose the backend (auto-selection picks cuda only
    when it is usable)."""
    return CONFIG.backend == "cuda"


def _driver():
    from fearless.runtime.device import driver_version
    version = driver_version()
    if version is None:
        return False, "no NVIDIA driver answered" + \
            ("" if _cuda_asked_for() else "; the cpu backend will be used")
    return True, f"NVIDIA driver, CUDA {version[0]}.{version[1]}"


def _gpu():
    from fearless.runtime.device import cuda_probe
    ok, detail = cuda_probe()
    if ok or _cuda_asked_for():
        return ok, f"GPU: {detail}"
    return ok, f"GPU: {detail}; kernels run on the cpu backend"


def _backend():
    from fearless.runtime.device import cuda_probe, current_backend
    usable, _ = cuda_probe()
    if _cuda_asked_for() and not usable:
        return False, ("backend: FEARLESS_BACKEND=cuda asks for the GPU, which cannot run "
                       "kernels (see above): every launch will fail; unset FEARLESS_BACKEND "
                       "or set it to cpu")
    backend = current_backend()
    why = " (FEARLESS_BACKEND)" if CONFIG.backend else ("" if usable else " (no usable GPU)")
    return True, f"backend: {backend}{why}"


def _cache():
    path = CONFIG.cache_dir
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".doctor"
        probe.write_text("ok")
        probe.unlink()
        state = "on" if CONFIG.disk_cache else "off (FEARLESS_CACHE=0)"
        return True, f"JIT cache: {path} (disk cache {state})"
    except OSError as exc:
        return False, f"JIT cache dir {path} is not writable ({exc}); set FEARLESS_CACHE_DIR"


CHECKS = (("python", _python, True), ("llvm", _llvm, True), ("libdevice", _libdevice, True),
          ("nvjitlink", _nvjitlink, False), ("tileiras", _tileiras, False),
          ("nvrtc", _nvrtc, False),
          ("driver", _driver, False), ("gpu", _gpu, False),
          ("cache", _cache, True), ("backend", _backend, True))


def run() -> int:
    """Print the checks; exit status 1 when a required check failed (see the module)."""
    failed = False
    for _, check, required in CHECKS:
        ok, line = check()
        print(f"{'OK  ' if ok else ('FAIL' if required else 'warn')}  {line}")
        failed |= required and not ok
    return 1 if failed else 0
