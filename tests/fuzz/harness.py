"""Run one seed: generate, write and import the kernel, run the reference and the CPU backend,
compare, and compile the kernel through the GPU path (no GPU needed).

``run_seed`` never raises for a finding: it returns an ``Outcome`` whose ``status`` is
``pass``, ``mismatch`` (a backend computed something the reference rejects), ``crash`` (an
exception inside fearless: an InternalError or an error of the GPU compile path), ``rejected``
(the frontend refused a kernel the generator believes valid: a generator or frontend bug, to
triage) or ``error`` (the fuzzer itself failed).
"""
from __future__ import annotations

import importlib.util
import random
import re
import time
import traceback
import warnings
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fearless.backends.tileir import tileiras
from fearless.config import CONFIG
from fearless.errors import BackendError, CompileError, FearlessError
from fearless.runtime import ahead, device
from tests.fuzz import classify, data, scalar, simt_program, tile_program
from tests.fuzz.options import Options

ARCHS = ("sm_80", "sm_90")
TILE_SHARE = 0.2  # of the seeds generate tile kernels
# a tileiras run slower than this fails its seed as a crash (with the kernel), where the library's
# limit (300 s) outlasted device mode's grace after its time limit (device.HANG_SECONDS): seed
# 55660 was a 'hang' with no kernel (tileiras 13.4 ran on; 13.5 crashes after 270 s here)
TILEIRAS_SECONDS = 45


@dataclass
class Outcome:
    seed: int
    kind: str = "?"
    status: str = "pass"
    cls: str = ""
    detail: str = ""
    source: str = ""
    known: frozenset = frozenset()
    checked: int = 0
    stats: Counter = field(default_factory=Counter)
    times: dict = field(default_factory=dict)
    outputs: dict | None = None    # device mode: the CPU backend's outputs,
    gpu_expected: object = None    # the reference with the GPU's error bounds (data.Expected)

    def fail(self, status: str, cls: str, detail: str) -> "Outcome":
        if self.status == "pass":
            self.status, self.cls, self.detail = status, cls, detail
        return self


def repro(seed: int, opts: Options) -> str:
    flags = " --skip-known" if opts.skip_known else ""
    flags += "".join(f" --guard {g}" for g in sorted(opts.guards))
    return f"PYTHONPATH=src python -m tests.fuzz --cpu --seeds {seed}{flags} -v"


def generate(seed: int, opts: Options):
    """The program of ``seed`` (with ``skip_known``, the first of its retries without a known
    class's construct)."""
    rng = random.Random(seed)
    tile = rng.random() < TILE_SHARE
    for _ in range(50):
        program = (tile_program if tile else simt_program).generate(seed, opts, rng)
        known = classify.known_in(program)
        if not (opts.skip_known and known):
            return program, known
    return program, known


def load(path: Path, name: str):
    """Import the kernel file at ``path`` (kernels need a real source file)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write(program, seed: int, opts: Options, workdir: Path) -> Path:
    tag = "k" if not opts.skip_known else "s"
    path = workdir / f"fuzz_{tag}{seed}.py"
    path.write_text(program.source(repro(seed, opts)))
    return path


def run_seed(seed: int, opts: Options, workdir: Path, archs=ARCHS,
             device_arch: str | None = None) -> Outcome:
    """Everything for one seed (see the module docstring); NumPy's warnings are silenced (a
    kernel overflows or divides by zero as often as not). ``device_arch``: also compile the
    kernel for that GPU into the disk cache (``FEARLESS_CACHE_DIR``) and keep what a GPU run
    is compared with (device mode)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"), _tileiras_limit():
        warnings.simplefilter("ignore")
        return _run_seed(seed, opts, workdir, archs, device_arch)


@contextmanager
def _tileiras_limit():
    before = tileiras.TIMEOUT_S
    tileiras.TIMEOUT_S = min(before, TILEIRAS_SECONDS)
    try:
        yield
    finally:
        tileiras.TIMEOUT_S = before


def _run_seed(seed, opts, workdir, archs, device_arch) -> Outcome:
    out = Outcome(seed)
    t0 = time.perf_counter()
    try:
        program, known = generate(seed, opts)
        out.kind, out.known = program.kind, frozenset(known)
        path = write(program, seed, opts, workdir)
        out.source = str(path)
        module = load(path, f"fuzz_kernel_{seed}")
        kernel = getattr(module, program.name)
        args = program.arguments()
        t1 = time.perf_counter()
        expected = program.reference(args, scalar.CPU)
        out.stats = expected.stats
        t2 = time.perf_counter()
        out.times.update(generate=t1 - t0, reference=t2 - t1)
    except Exception:
        return out.fail("error", "fuzzer", traceback.format_exc())
    previous = device.current_backend()
    device.set_backend("cpu")
    try:
        got = program.launch(kernel, args)
    except Exception as exc:
        notes = " ".join(getattr(exc, "__notes__", ()))
        cross = re.search(r"for (sm_\d+) \(FEARLESS_CROSS_COMPILE\)", notes)
        where = f"{cross.group(1)}: " if cross else "cpu: "  # a GPU compile at the launch
        if isinstance(exc, CompileError) and not cross:
            cls = "maybe: " + ", ".join(sorted(known)) if known else type(exc).__name__
            return out.fail("rejected", f"rejected: {cls}", _text(exc))
        return out.fail("crash", where + classify.crash_class(_text(exc), known),
                        _text(exc) + "\n" + notes)
    finally:
        device.set_backend(previous)
    t3 = time.perf_counter()
    out.times["cpu"] = t3 - t2
    bad, out.checked = data.compare(got, expected)
    if bad:
        cls = classify.mismatch_class(bad[0].tags, known)
        out.fail("mismatch", "cpu: " + cls, "\n".join(map(str, bad)))
    for arch in [a for a in archs if a not in ahead.archs(CONFIG)]:  # else the launch did
        try:
            program.compile_gpu(kernel, arch)
        except Exception as exc:
            if isinstance(exc, BackendError) and "not installed" in str(exc):
                out.stats["not compiled: tileiras is not installed"] += 1
            else:
                out.fail("crash", f"{arch}: " + classify.crash_class(_text(exc), known),
                         _text(exc))
            break
    out.times["gpu-compile"] = time.perf_counter() - t3
    if device_arch is not None and out.status == "pass":
        try:
            t4 = time.perf_counter()
            program.compile_cached(kernel, device_arch)
            out.times["device-compile"] = time.perf_counter() - t4
            out.gpu_expected = program.reference(args, scalar.GPU)
        except Exception as exc:
            if isinstance(exc, BackendError) and "not installed" in str(exc):
                return out.fail("not run", "tileiras is not installed", str(exc))
            return out.fail("crash", f"{device_arch}: " + classify.crash_class(
                _text(exc), known), _text(exc))
        out.outputs = got
    return out


def _text(exc: BaseException) -> str:
    """The exception and its cause chain, with the innermost frames of anything raised inside
    fearless (an InternalError keeps the original error as its cause)."""
    parts = []
    while exc is not None:
        parts.append("".join(traceback.format_exception_only(type(exc), exc)).strip())
        if not isinstance(exc, FearlessError) or exc.__cause__ is None:
            frames = traceback.format_tb(exc.__traceback__)[-3:]
            if not isinstance(exc, FearlessError):
                parts.append("".join(frames).rstrip())
        exc = exc.__cause__ if exc.__cause__ is not exc else None
    return "\n".join(parts)


def describe(out: Outcome) -> str:
    """A failure's report: status, class, detail, the kernel source and a repro line."""
    source = Path(out.source).read_text() if out.source and Path(out.source).exists() else ""
    lines = [f"seed {out.seed} ({out.kind}): {out.status}: {out.cls}", out.detail.rstrip()]
    if out.known:
        lines.append(f"known-class constructs in this kernel: {', '.join(sorted(out.known))}")
    lines += ["--- kernel source ---", source.rstrip(), "---",
              f"reproduce: {source.splitlines()[0].split('Reproduce: ')[-1].rstrip(chr(34))}"
              if source else ""]
    return "\n".join(lines)

