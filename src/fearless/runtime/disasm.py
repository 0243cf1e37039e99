"""SASS, the GPU's machine code, of a cubin: ``fearless inspect --stage sass``.

Runs NVIDIA's disassembler on the cubin nvJitLink (or tileiras) produced: ``nvdisasm`` (prints the
code sections) or ``cuobjdump -sass``, whichever is found first, looked up on PATH, under
``CUDA_HOME`` / ``CUDA_PATH``, then in the pip wheels that ship them (``nvidia-cuda-nvdisasm``
and ``nvidia-cuda-cuobjdump``, each a few MB, install into ``site-packages/nvidia/cu13/bin``;
``nvidia-cuda-nvcc`` has neither). Without either, ``BackendError`` says what to install. Tool
I/O only: no CUDA library is loaded.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from fearless.errors import BackendError

TOOLS = ("nvdisasm", "cuobjdump")
FIX = ("pip install nvidia-cuda-nvdisasm (or nvidia-cuda-cuobjdump), or install the CUDA "
       "toolkit, or put nvdisasm / cuobjdump on PATH")


def _wheel_dirs() -> list[Path]:
    spec = importlib.util.find_spec("nvidia")
    if spec is None or not spec.submodule_search_locations:
        return []
    return [Path(p) for p in spec.submodule_search_locations]


def find() -> tuple[str, str] | None:
    """(tool name, executable path) of the first disassembler found, or None."""
    for tool in TOOLS:
        found = shutil.which(tool)
        if found:
            return tool, found
    for tool in TOOLS:
        for var in ("CUDA_HOME", "CUDA_PATH"):
            root = os.environ.get(var)
            if root and Path(root, "bin", tool).is_file():
                return tool, str(Path(root, "bin", tool))
        for base in _wheel_dirs():
            for candidate in sorted(base.glob(f"*/bin/{tool}")):
                if candidate.is_file() and os.access(candidate, os.X_OK):
                    return tool, str(candidate)
    return None


def disassemble(cubin: bytes, kernel: str | None = None) -> str:
    """The SASS text of ``cubin``. Raises BackendError when no disassembler is installed or it
    fails."""
    found = find()
    if found is None:
        raise BackendError("disassembling a cubin to SASS needs nvdisasm or cuobjdump, and "
                           "neither was found", kernel=kernel, help=FIX)
    tool, exe = found
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, f"{kernel or 'kernel'}.cubin")
        path.write_bytes(cubin)
        args = [exe, "--print-code", str(path)] if tool == "nvdisasm" else \
            [exe, "-sass", str(path)]
        proc = subprocess.run(args, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BackendError(f"{tool} failed (exit {proc.returncode}): "
                           f"{proc.stderr.strip()[:500]}", kernel=kernel,
                           help="is the disassembler older than the cubin's arch? " + FIX)
    return proc.stdout
