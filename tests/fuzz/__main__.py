"""The fuzzer's command line (run from the repository root, with ``src`` on the path).

    python -m tests.fuzz --cpu --seeds 0:500 --jobs 2 --out /tmp/fuzz     # CPU vs reference,
                                                                          # + sm_80/sm_90 compiles
    python -m tests.fuzz --device --seeds 0:2500 --jobs 16 --out DIR      # GPU vs CPU (H200)
    python -m tests.fuzz --print 123                                      # one kernel's source

``--skip-known`` avoids the constructs of the bug classes other branches are fixing, so that new
ones stand out; ``--guard NAME`` keeps one kind of edge case out (see the package docstring).
The summary table is printed last; ``--out`` gets ``log.txt`` and, in ``failures/``, each
failing kernel's source and report. Kernels and compiled code go to a scratch directory.
"""
from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time
from functools import partial
from pathlib import Path


def _seeds(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        if ":" in part:
            lo, hi = part.split(":")
            out += range(int(lo), int(hi))
        else:
            out.append(int(part))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__.split("\n")[0])
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--cpu", action="store_true", help="CPU backend vs the reference, and "
                      "the GPU compile path (the default)")
    mode.add_argument("--device", action="store_true", help="the GPU vs the CPU backend")
    mode.add_argument("--print", type=int, metavar="SEED", help="print one seed's kernel")
    p.add_argument("--seeds", type=_seeds, default=list(range(100)),
                   help="A:B (half-open), N, or a comma-separated mix (default 0:100)")
    p.add_argument("--jobs", type=int, default=1, help="worker processes")
    p.add_argument("--out", type=Path, help="directory for log.txt and failures/")
    p.add_argument("--skip-known", action="store_true", help="avoid the known bug classes")
    p.add_argument("--guard", action="append", default=[], metavar="NAME",
                   help="keep an edge case out: int-div (signs, zero divisors), shift (by the "
                        "width or more), float-int-cast (NaN, inf, out of range)")
    p.add_argument("--archs", default="sm_80,sm_90", help="--cpu: archs to compile for "
                   "('' for none)")
    p.add_argument("--time-limit", type=float, default=None,
                   help="seconds before no new seed starts (device default 540)")
    p.add_argument("-v", "--verbose", action="store_true", help="print each failure in full")
    p.add_argument("--stand-in", default=None, help=argparse.SUPPRESS)  # see device.py
    a = p.parse_args(argv)

    # kernels and compiled code live in a scratch directory: --out gets only the log and the
    # failing kernels (it may travel back from a GPU machine)
    scratch = Path(tempfile.mkdtemp(prefix="fuzz-"))
    workdir = scratch / "kernels"
    workdir.mkdir()
    os.environ.setdefault("FEARLESS_CACHE_DIR", str(scratch / "cache"))
    os.environ.setdefault("FEARLESS_PROGRESS", "0")  # thousands of compiles: the summary says
    if a.out is not None:
        a.out.mkdir(parents=True, exist_ok=True)

    from tests.fuzz import device, harness  # after the environment (the cache dir) is set
    from tests.fuzz.options import GUARDS, Options
    from tests.fuzz.report import Report

    unknown = set(a.guard) - set(GUARDS)
    if unknown:
        p.error(f"unknown guard {', '.join(sorted(unknown))}; guards: {', '.join(GUARDS)}")
    opts = Options(guards=frozenset(a.guard), skip_known=a.skip_known)
    if a.print is not None:
        program, known = harness.generate(a.print, opts)
        print(program.source(harness.repro(a.print, opts)), end="")
        if known:
            print(f"# known-class constructs: {', '.join(sorted(known))}")
        return 0

    report = Report(a.out)
    t0 = time.monotonic()
    if a.device:
        stand_in = None
        if a.stand_in:  # the plumbing's tests: the CPU backend plays the GPU (JSON)
            stand_in = json.loads(a.stand_in)
        device.run_device(a.seeds, opts, max(1, a.jobs - 1), workdir, report,
                          a.time_limit or 540.0, stand_in)
    else:
        archs = tuple(x for x in a.archs.split(",") if x)
        task = partial(device.cpu_task, opts=opts, workdir=workdir, archs=archs)
        if a.jobs > 1:
            with mp.get_context("spawn").Pool(a.jobs) as pool:
                _collect(pool.imap_unordered(task, a.seeds), report, a, t0, opts, workdir)
        else:  # in this process, one seed after another (a debugger can step in)
            _collect(None, report, a, t0, opts, workdir, map(task, a.seeds))
    report.close()
    if a.verbose:
        for o in sorted(report.outcomes, key=lambda o: o.seed):
            if o.status != "pass":
                print(harness.describe(o), end="\n\n")
    print(report.summary(time.monotonic() - t0, "device" if a.device else "cpu"))
    if a.out is not None:
        shutil.rmtree(scratch, ignore_errors=True)
    bad = [o for o in report.outcomes if o.status not in ("pass", "not run")]
    return 1 if bad else 0


def _collect(results, report, a, t0, opts, workdir, serial=None):
    """The outcomes of a pool's ``results`` (or of the ``serial`` iterable) into `report` until
    the time limit; then those of the seeds a worker had taken (``device.drain``) and, for the
    rest, ``device.leftovers``."""
    from tests.fuzz.device import drain, leftovers, until
    done = set()

    def take(o):
        report.add(o)
        done.add(o.seed)

    hung = set()
    limit = t0 + (a.time_limit or math.inf)
    for o in (serial if serial is not None else until(results, limit)):
        if o is not None:
            take(o)
        if time.monotonic() > limit:
            break
    if results is not None and time.monotonic() > limit:
        hung = drain(results, a.seeds, done, a.jobs, take)
    for o in leftovers(a.seeds, done, hung, opts, workdir):
        report.add(o)


if __name__ == "__main__":
    sys.exit(main())
