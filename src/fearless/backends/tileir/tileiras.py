"""The ``tileiras`` toolchain: find it, check its siblings, run it safely. No GPU needed.

Job: the only module of the Tile IR backend that runs subprocesses. ``find()`` locates a
``tileiras`` (and ``tileirdisasm``) with its two back-end siblings, libNVVM and ``ptxas``; a
``Toolchain`` compiles bytecode to a cubin, disassembles it, and reports its versions.

Why the environment is scrubbed: tileiras takes its back end from ``$CUDA_HOME``, ``$CUDA_PATH``
or ``$CUDA_ROOT`` before its own directory (``<root>/nvvm/lib64/libnvvm.so``, then
``<root>/lib/libnvvm.so.4``; ``<root>/bin/ptxas``, then ``$PATH``). A machine whose CUDA_HOME
points at an older toolkit makes it load that libNVVM and fail with "failed to compile Tile IR
program" (reproduced and fixed on the H200; /work/shared/reference/tile-ir.md §4). So we remove
the three variables and check that the siblings sit where tileiras will look: with the pip
wheels (``nvidia-cuda-tileiras``, ``nvidia-nvvm``, ``nvidia-cuda-nvcc``) they all land in one
``site-packages/nvidia/cu13`` root (``bin/tileiras``, ``lib/libnvvm.so.4``, ``bin/ptxas``).

Search order of ``find()``: ``$FEARLESS_TILEIRAS`` (path to the binary); the
``nvidia/cu13/bin/tileiras`` of an installed wheel; ``.tiletc/root/bin/tileiras`` under the
current directory (a bundle made by tools/tile-toolchain.sh); ``tileiras`` on ``$PATH``.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from fearless.backends.tileir.ops import SUPPORTED_VERSIONS
from fearless.errors import BackendError, CompileError

SCRUBBED = ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT")
TIMEOUT_S = 300
FIX = ("pip install 'fearless[tile]' (nvidia-cuda-tileiras, nvidia-nvvm, nvidia-cuda-nvcc "
       ">= 13.5; 13.4 works, with persistent loops at half speed)")
_ARCH = re.compile(r"^sm_\d{2,3}[af]?$")


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in SCRUBBED}


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _trim(text: str, limit: int = 2000) -> str:
    lines = [ln.rstrip() for ln in text.strip().splitlines() if ln.strip()]
    out = "\n".join(lines[-25:])
    return out if len(out) <= limit else "..." + out[-limit:]


@dataclass(frozen=True)
class Toolchain:
    """A checked tileiras installation. ``root`` is the directory tileiras searches (``bin/..``)."""
    tileiras: Path
    tileirdisasm: Path | None
    root: Path
    libnvvm: Path
    ptxas: Path

    # --- queries (cached: one subprocess each per toolchain) ------------------------------

    def versions(self) -> tuple[tuple[int, int], ...]:
        """Bytecode versions this tileiras reads (``--list-versions``), e.g. ((13, 1), ...)."""
        return _versions(self)

    def fingerprint(self) -> str:
        """A string that changes when the compiler changes (cache keys): release and build."""
        return _fingerprint(self)

    def release(self) -> tuple[int, int]:
        """The CUDA release this tileiras belongs to, e.g. (13, 5), from ``--version``."""
        found = re.search(r"release (\d+)\.(\d+)", self.fingerprint())
        return (int(found.group(1)), int(found.group(2))) if found else (0, 0)

    def pick_version(self) -> tuple[int, int]:
        """The newest bytecode version that both our writer and this tileiras support."""
        both = [v for v in SUPPORTED_VERSIONS if v in self.versions()]
        if not both:
            have = ", ".join(f"{a}.{b}" for a, b in self.versions()) or "none"
            raise BackendError(f"tileiras at {self.tileiras} reads bytecode {have}; fearless "
                               "emits 13.3 to 13.5", help=FIX)
        return max(both)

    # --- actions --------------------------------------------------------------------------

    def compile(self, bytecode: bytes, arch: str = "sm_90", opt_level: int = 3,
                kernel: str = "kernel", lineinfo: bool = False) -> bytes:
        """Bytecode -> cubin for `arch` (sm_80 and newer); CompileError quotes tileiras."""
        if not _ARCH.match(arch):
            raise ValueError(f"arch must look like 'sm_90', got {arch!r}")
        if opt_level not in (0, 1, 2, 3):
            raise ValueError(f"opt_level must be 0..3, got {opt_level!r}")
        with tempfile.TemporaryDirectory(prefix="fearless-tileir-") as tmp:
            src, out = Path(tmp) / "kernel.tileirbc", Path(tmp) / "kernel.cubin"
            src.write_bytes(bytecode)
            cmd = [str(self.tileiras), f"--gpu-name={arch}", f"--opt-level={opt_level}",
                   f"--output-file={out}", str(src)]
            if lineinfo:
                cmd.insert(1, "--lineinfo")
            proc = self._run(cmd, kernel)
            if proc.returncode != 0 or not out.exists():
                said = _trim((proc.stderr + "\n" + proc.stdout).replace(tmp + os.sep, ""))
                if proc.returncode < 0:  # killed by a signal: a crash, often with no output
                    said = (f"tileiras crashed ({_signal_name(-proc.returncode)})" +
                            (f":\n{said}" if said else ""))
                raise CompileError(f"tileiras could not compile the Tile IR for {arch}:\n{said}",
                                   kernel=kernel,
                                   help="this is a fearless bug if the kernel type-checked; "
                                        "please report it with the message above")
            return out.read_bytes()

    def disasm(self, bytecode: bytes) -> str:
        """The textual Tile IR of `bytecode`, as printed by tileirdisasm."""
        if self.tileirdisasm is None:
            raise BackendError(f"no tileirdisasm next to {self.tileiras}", help=FIX)
        with tempfile.TemporaryDirectory(prefix="fearless-tileir-") as tmp:
            src = Path(tmp) / "kernel.tileirbc"
            src.write_bytes(bytecode)
            proc = self._run([str(self.tileirdisasm), str(src)], "disasm", tool="tileirdisasm")
            if proc.returncode != 0:
                said = _trim((proc.stderr + "\n" + proc.stdout).replace(tmp + os.sep, ""))
                raise CompileError(f"tileirdisasm could not read the bytecode:\n{said}")
            return proc.stdout

    def _run(self, cmd: list[str], kernel: str, tool: str = "tileiras"):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, env=_clean_env(), check=False,
                                  timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise CompileError(f"{tool} did not finish within {TIMEOUT_S} s",
                               kernel=kernel) from None
        except OSError as e:
            raise BackendError(f"cannot run {cmd[0]}: {e.strerror or e}", help=FIX) from None


@cache
def _versions(tc: Toolchain) -> tuple[tuple[int, int], ...]:
    proc = tc._run([str(tc.tileiras), "--list-versions"], "list-versions")
    found = {(int(a), int(b)) for a, b in re.findall(r"\b(\d+)\.(\d+)\b", proc.stdout)}
    if proc.returncode != 0 or not found:
        raise BackendError(f"{tc.tileiras} --list-versions failed: "
                           f"{_trim(proc.stderr + proc.stdout) or 'no output'}", help=FIX)
    return tuple(sorted(found))


@cache
def _fingerprint(tc: Toolchain) -> str:
    proc = tc._run([str(tc.tileiras), "--version"], "version")
    text = proc.stdout + proc.stderr
    release = re.search(r"release [^\n]*", text)
    build = re.search(r"Build [^\n]*", text)
    if proc.returncode != 0 or release is None:
        raise BackendError(f"{tc.tileiras} --version failed: {_trim(text) or 'no output'}",
                           help=FIX)
    return "tileiras " + release.group(0) + (f" ({build.group(0)})" if build else "")


# --- finding the toolchain ------------------------------------------------------------------


def _wheel_roots() -> list[Path]:
    """``nvidia/cu13`` directories of installed NVIDIA wheels (a namespace package)."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    return [Path(p) / "cu13" for p in (spec.submodule_search_locations or [])]


def _candidates(env) -> list[tuple[str, Path]]:
    out = []
    for root in _wheel_roots():
        out.append(("the nvidia-cuda-tileiras wheel", root / "bin" / "tileiras"))
    out.append(("the carried .tiletc bundle", Path.cwd() / ".tiletc" / "root" / "bin" / "tileiras"))
    on_path = shutil.which("tileiras", path=env.get("PATH"))
    if on_path:
        out.append(("PATH", Path(on_path)))
    return out


def check(tileiras: Path, origin: str = "") -> Toolchain:
    """A Toolchain for this binary, or BackendError naming the missing sibling and the fix."""
    tileiras = Path(tileiras).resolve()
    where = f" ({origin})" if origin else ""
    if not (tileiras.is_file() and os.access(tileiras, os.X_OK)):
        raise BackendError(f"tileiras{where} not found or not executable: {tileiras}", help=FIX)
    root = tileiras.parent.parent
    # the order tileiras itself tries (strace, tile-ir.md §4)
    nvvm = next((p for p in (root / "nvvm" / "lib64" / "libnvvm.so", root / "lib" / "libnvvm.so.4")
                 if p.is_file()), None)
    if nvvm is None:
        raise BackendError(
            f"tileiras at {tileiras}{where} has no libNVVM beside it (looked for "
            f"{root / 'lib' / 'libnvvm.so.4'} and {root / 'nvvm' / 'lib64' / 'libnvvm.so'}); "
            "without it tileiras fails with 'failed to compile Tile IR program'",
            help=FIX + "; install them into the same environment as tileiras")
    ptxas = root / "bin" / "ptxas"
    if not ptxas.is_file():
        raise BackendError(
            f"tileiras at {tileiras}{where} has no ptxas beside it ({ptxas}); an older ptxas "
            "from PATH rejects the PTX it makes",
            help=FIX + "; install them into the same environment as tileiras")
    disasm = tileiras.parent / "tileirdisasm"
    return Toolchain(tileiras, disasm if disasm.is_file() else None, root, nvvm, ptxas)


def find(env=None) -> Toolchain | None:
    """The first usable tileiras in the search order above, or None if there is none at all.

    ``$FEARLESS_TILEIRAS`` must name a working installation (a wrong override raises). A
    tileiras found without its siblings raises BackendError saying which one is missing,
    unless a later candidate is complete.
    """
    env = os.environ if env is None else env
    override = env.get("FEARLESS_TILEIRAS")
    if override:
        return check(Path(override), "FEARLESS_TILEIRAS")
    first_error = None
    for origin, path in _candidates(env):
        if not path.is_file():
            continue
        try:
            return check(path, origin)
        except BackendError as e:
            first_error = first_error or e
    if first_error is not None:
        raise first_error
    return None
