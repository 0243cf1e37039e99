"""``fearless sanitize``: run a Python script under NVIDIA's compute-sanitizer.

    fearless sanitize SCRIPT [--tool memcheck|racecheck|initcheck|synccheck] [-- ARGS...]

The script runs with ``FEARLESS_BACKEND=cuda`` as ``compute-sanitizer --tool T
--error-exitcode 86 python SCRIPT ARGS``, so any finding makes the command exit non-zero (86, or
the script's own failure code). compute-sanitizer comes with the CUDA toolkit (``$CUDA_HOME/bin``)
or the ``nvidia-cuda-sanitizer-api`` wheel; without it the command says so and exits 0 (skipped),
so CI on machines without the toolkit stays green. The tools: memcheck (out-of-bounds and
misaligned accesses), racecheck (shared-memory hazards), initcheck (reads of uninitialised
device memory), synccheck (invalid barrier and warp-synchronisation use).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
FINDING_EXIT = 86


def find() -> str | None:
    """The compute-sanitizer executable: on PATH, else under CUDA_HOME / CUDA_PATH, else None."""
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        candidate = Path(root, "bin", "compute-sanitizer") if root else None
        if candidate is not None and candidate.is_file():
            return str(candidate)
    return None


def command(exe: str, script: str, tool: str, args: list[str]) -> list[str]:
    return [exe, "--tool", tool, "--error-exitcode", str(FINDING_EXIT), "--target-processes",
            "all", sys.executable, script, *args]


def run(script: str, tool: str = "memcheck", args: list[str] | None = None,
        exe: str | None = None) -> int:
    """Run ``script`` under the sanitizer; return its exit code (0: clean or skipped)."""
    if tool not in TOOLS:
        print(f"error: unknown tool {tool!r}; tools: {', '.join(TOOLS)}", file=sys.stderr)
        return 2
    exe = exe or find()
    if exe is None:
        print("compute-sanitizer was not found (install the CUDA toolkit or set CUDA_HOME); "
              "skipped", file=sys.stderr)
        return 0
    env = {**os.environ, "FEARLESS_BACKEND": "cuda"}
    code = subprocess.run(command(exe, script, tool, args or []), env=env, check=False).returncode
    if code == FINDING_EXIT:
        print(f"compute-sanitizer {tool} reported errors in {script}", file=sys.stderr)
    return code
