"""``fearless sanitize``: run a Python script under NVIDIA's compute-sanitizer.

    fearless sanitize SCRIPT [--tool memcheck|racecheck|initcheck|synccheck] [-- ARGS...]
    fearless sanitize SCRIPT... [--tool T ... | --tool all] [--jobs N] [-- ARGS...]

The script runs with ``FEARLESS_BACKEND=cuda`` (and under initcheck ``FEARLESS_TMA=0``:
initcheck does not see TMA's bulk tensor stores, so it would report every later read of a tile
kernel's TMA-stored output as uninitialised) as ``compute-sanitizer --tool T --error-exitcode 86
python SCRIPT ARGS``, so any finding makes the command exit non-zero (86, or the script's own
failure code). Only the script's own process is sanitized (``--target-processes
application-only``). With ``all``, compute-sanitizer also followed the tileiras processes that a
tuning runs, several at once, to compile its configs: in 3 of 4 runs of every example under the
four tools (H200, CUDA 13.0, a cold cache), one sanitized process died of a segmentation fault
while a tuning compiled; with ``application-only``, 3 runs of 3 were clean. tileiras runs
nothing on the GPU; a script whose own child processes run kernels needs compute-sanitizer
directly. compute-sanitizer comes with the CUDA toolkit (``$CUDA_HOME/bin``) or the
``nvidia-cuda-sanitizer-api`` wheel; without it the command says so and exits 0 (skipped), so CI
on machines without the toolkit stays green. The tools: memcheck (out-of-bounds and misaligned
accesses), racecheck (shared-memory hazards), initcheck (reads of uninitialised device memory),
synccheck (invalid barrier and warp-synchronisation use). With several scripts or tools,
``run_many`` runs every (script, tool) pair, ``jobs`` at a time (one GPU serves several
sanitized processes), keeps each run's output in a log file and prints one line per run.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
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
            "application-only", sys.executable, script, *args]


def _gpu_env(tool: str) -> dict:
    """The scripts' environment under ``tool``: fearless on the GPU; for initcheck, tile
    kernels compiled without TMA (see the module docstring)."""
    return {**os.environ, "FEARLESS_BACKEND": "cuda",
            **({"FEARLESS_TMA": "0"} if tool == "initcheck" else {})}


def _executable(tools, exe: str | None, skipped: str) -> tuple[str | None, int]:
    """(the compute-sanitizer to run, 0), or (None, the exit code) after saying why not: an
    unknown tool (2) or no compute-sanitizer (0, ``skipped`` says what was skipped)."""
    bad = [t for t in tools if t not in TOOLS]
    if bad:
        print(f"error: unknown tool {bad[0]!r}; tools: {', '.join(TOOLS)}", file=sys.stderr)
        return None, 2
    exe = exe or find()
    if exe is None:
        print(f"compute-sanitizer was not found (install the CUDA toolkit or set CUDA_HOME); "
              f"skipped{skipped}", file=sys.stderr)
        return None, 0
    return exe, 0


def run(script: str, tool: str = "memcheck", args: list[str] | None = None,
        exe: str | None = None) -> int:
    """Run ``script`` under the sanitizer; return its exit code (0: clean or skipped)."""
    exe, stop = _executable((tool,), exe, "")
    if exe is None:
        return stop
    code = subprocess.run(command(exe, script, tool, args or []), env=_gpu_env(tool),
                          check=False).returncode
    if code == FINDING_EXIT:
        print(f"compute-sanitizer {tool} reported errors in {script}", file=sys.stderr)
    return code


def run_many(scripts: list[str], tools: tuple, args: list[str] | None = None, jobs: int = 4,
             exe: str | None = None, log_dir: str | None = None) -> int:
    """Every script under every tool, ``jobs`` runs at a time; prints ``clean``, ``FINDING`` or
    ``failed (exit code)`` per run with its log file (under ``log_dir``, default a new
    temporary directory). Returns 0 when every run was clean (or compute-sanitizer is missing:
    skipped), else the first non-zero exit code, ``FINDING_EXIT`` if any run had a finding."""
    exe, stop = _executable(tools, exe, f" {len(scripts) * len(tools)} runs: "
                                        f"{', '.join(scripts)} under {', '.join(tools)}")
    if exe is None:
        return stop
    logs = Path(log_dir or tempfile.mkdtemp(prefix="fearless-sanitize-"))
    logs.mkdir(parents=True, exist_ok=True)

    def one(pair):
        script, tool = pair
        log = logs / f"{Path(script).stem}.{tool}.log"
        with open(log, "w") as out:
            code = subprocess.run(command(exe, script, tool, args or []), env=_gpu_env(tool),
                                  check=False, stdout=out, stderr=subprocess.STDOUT).returncode
        return script, tool, code, log

    pairs = [(s, t) for s in scripts for t in tools]
    with ThreadPoolExecutor(max(1, jobs)) as pool:
        results = list(pool.map(one, pairs))
    width = max(len(f"{Path(s).name} {t}") for s, t in pairs)
    for script, tool, code, log in results:
        verdict = "clean" if code == 0 else "FINDING" if code == FINDING_EXIT else \
            f"failed (exit {code})"
        print(f"{f'{Path(script).name} {tool}':<{width}}  {verdict:<18} {log}")
    codes = [code for *_, code, _ in results if code]
    return FINDING_EXIT if FINDING_EXIT in codes else (codes[0] if codes else 0)
