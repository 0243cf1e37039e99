"""Device mode: compile in parallel processes, run every kernel on the GPU in one process, and
compare the GPU with the CPU backend and the reference.

Workers (a ``spawn`` pool, no CUDA) run each seed as CPU mode does and also compile it for the
GPU's arch into the disk cache (``FEARLESS_CACHE_DIR``, set by the CLI). One GPU process loads
each kernel from that cache and runs it: integers and every exactly rounded float must equal the
CPU backend's bit for bit, the rest must stay inside the reference's GPU error bounds (fma
contraction, libdevice's ulps; ``scalar.GPU``). A GPU process that dies (a poisoned context) or
stops answering (a hung kernel) is replaced, and the seed it held is recorded.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import queue
import time
import traceback
import warnings
from functools import partial
from pathlib import Path

import numpy as np

from tests.fuzz import classify, data, harness
from tests.fuzz.harness import Outcome
from tests.fuzz.options import Options

HANG_SECONDS = 60


def cpu_task(seed: int, opts: Options, workdir: Path, archs) -> Outcome:
    return harness.run_seed(seed, opts, workdir, archs)


def compile_task(seed: int, opts: Options, workdir: Path, arch: str) -> Outcome:
    return harness.run_seed(seed, opts, workdir, archs=(), device_arch=arch)


def gpu_process(inq, outq, current, opts: Options, workdir: Path, stand_in: dict | None = None):
    """The GPU side: say the arch, then run each outcome sent until None. ``current`` (shared
    memory, readable after this process dies) holds the seed being run and since when.
    ``stand_in`` (tests of this plumbing on a machine without a GPU): the CPU backend runs the
    kernels, for ``{"arch": "sm_90"}``; ``"crash_seed"``/``"hang_seed"`` make the process die
    or hang at that seed, and ``"hang_seconds"`` shortens the wait for an answer."""
    from fearless.runtime import device
    try:
        device.set_backend("cpu" if stand_in else "cuda")
        outq.put(("arch", stand_in["arch"] if stand_in else device.cuda_arch()))
    except Exception as exc:
        outq.put(("fatal", f"{type(exc).__name__}: {exc}"))
        return
    while True:
        item = inq.get()
        if item is None:
            return
        with current.get_lock():
            current[0], current[1] = item.seed, time.time()
        if stand_in and stand_in.get("crash_seed") == item.seed:
            os._exit(3)
        if stand_in and stand_in.get("hang_seed") == item.seed:
            time.sleep(3600)
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            done = run_on_gpu(item, opts)
        with current.get_lock():
            current[0] = -1
        outq.put(("done", done))


def run_on_gpu(o: Outcome, opts: Options) -> Outcome:
    """Run seed ``o.seed`` on the GPU; compare with its CPU outputs and GPU bounds."""
    t0 = time.perf_counter()
    program, _ = harness.generate(o.seed, opts)
    try:
        module = harness.load(Path(o.source), f"fuzz_gpu_{o.seed}")
        kernel = getattr(module, program.name)
        args = program.arguments()
        got = program.launch(kernel, args)
    except Exception as exc:
        text = harness._text(exc)
        return o.fail("crash", "gpu: " + classify.crash_class(text, o.known), text)
    o.times["gpu-run"] = time.perf_counter() - t0
    tools = classify.toolchain_bugs()
    bad, _ = data.compare(got, o.gpu_expected)
    if bad:
        o.fail("mismatch", "gpu: " + classify.mismatch_class(bad[0].tags, o.known, tools),
               "\n".join(map(str, bad)))
    differ = _differ_from_cpu(got, o.outputs, o.gpu_expected)
    if differ:
        o.fail("mismatch", "gpu != cpu: " + classify.mismatch_class(differ[0][1], o.known, tools),
               "\n".join(d for d, _ in differ))
    o.outputs = o.gpu_expected = None
    return o


def _differ_from_cpu(gpu: dict, cpu: dict, exp: data.Expected) -> list:
    """Checked elements the reference says are exact, where the GPU and the CPU disagree."""
    out = []
    for name, want in cpu.items():
        g, c = np.asarray(gpu[name]), np.asarray(want)
        exact = exp.checked[name] & (exp.errors[name] == 0)
        if c.dtype.kind == "f" or c.dtype.name == "bfloat16":
            g64, c64 = g.astype(np.float64), c.astype(np.float64)
            same = (g64 == c64) | (np.isnan(g64) & np.isnan(c64))
        else:
            same = g == c
        for idx in np.argwhere(exact & ~same)[:8]:
            idx = tuple(int(k) for k in idx)
            out.append((f"{name}{list(idx)}: gpu {data.scalar_value(g[idx])!r}, cpu "
                        f"{data.scalar_value(c[idx])!r} (bit-exact)", exp.tags[name][idx]))
    return out


class GpuRunner:
    """The GPU process, restarted when it dies or hangs (the seed it held fails)."""

    RESTARTS = 20

    def __init__(self, ctx, opts: Options, workdir: Path, stand_in: dict | None = None):
        self.ctx, self.opts, self.workdir, self.stand_in = ctx, opts, workdir, stand_in
        self.current = ctx.Array("d", [-1.0, 0.0])  # seed, start time (time.time())
        self.sent: dict[int, Outcome] = {}
        self.restarts = 0
        self.broken = ""
        self.hang_seconds = (stand_in or {}).get("hang_seconds") or HANG_SECONDS
        self.start()

    def start(self):
        self.inq, self.outq = self.ctx.Queue(), self.ctx.Queue()
        self.current[0] = -1
        self.proc = self.ctx.Process(target=gpu_process, daemon=True,
                                     args=(self.inq, self.outq, self.current, self.opts,
                                           self.workdir, self.stand_in))
        self.proc.start()
        kind, value = self.outq.get(timeout=300)
        if kind != "arch":
            raise RuntimeError(f"the GPU process cannot start: {value}")
        self.arch = value
        for o in list(self.sent.values()):  # resend what the dead process had not finished
            self.inq.put(o)

    def send(self, o: Outcome):
        self.sent[o.seed] = o
        self.inq.put(o)

    def poll(self, timeout: float = 0.0) -> list[Outcome]:
        """Finished outcomes; replaces a dead or hung process (its seed fails)."""
        done = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                kind, value = self.outq.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            if kind == "done":
                self.sent.pop(value.seed, None)
                done.append(value)
        seed, since = int(self.current[0]), self.current[1]
        hung = seed >= 0 and time.time() - since > self.hang_seconds
        if not self.broken and (hung or not self.proc.is_alive()):
            self.proc.kill()
            self.proc.join()
            why = f"the GPU process stopped answering for {self.hang_seconds} s" if hung else \
                f"the GPU process died (exit code {self.proc.exitcode})"
            if seed in self.sent:
                done.append(self.sent.pop(seed).fail("hang" if hung else "crash",
                                                      "gpu: " + why, why))
            self.restarts += 1
            if self.restarts > self.RESTARTS:
                self.broken = f"{why}; gave up after {self.RESTARTS} restarts"
            else:
                self.start()
        if self.broken:
            done += [o.fail("crash", "gpu: process broken", self.broken)
                     for o in self.sent.values()]
            self.sent.clear()
        return done

    def stop(self):
        if not self.broken:
            self.inq.put(None)
            self.proc.join(timeout=30)
        if self.proc.is_alive():
            self.proc.kill()


def until(results, deadline: float, tick: float = 1.0):
    """The results of a pool's ``imap_unordered`` (chunksize 1: larger chunks give a generator
    without ``next(timeout)``) until they end or ``time.monotonic()`` passes
    `deadline`; None every `tick` seconds without one, so that a worker stuck on a seed (the
    frontend once folded ``1 << 2**40`` for hours) cannot keep the summary from printing."""
    while time.monotonic() < deadline:
        try:
            yield results.next(timeout=tick)
        except mp.TimeoutError:
            yield None
        except StopIteration:
            return


def drain(results, seeds, done: set, jobs: int, take) -> set:
    """After the time limit: the seeds a worker had taken get HANG_SECONDS more (their outcomes
    go to ``take``, their seeds into ``done``); returns those still running then, the hangs. A
    pool hands its tasks out in order, so the first ``len(done) + jobs`` seeds are the taken
    ones."""
    started = set(list(seeds)[:len(done) + jobs])
    for o in until(results, time.monotonic() + HANG_SECONDS):
        if o is not None:
            take(o)
        if started <= done:
            break
    return started - done


def leftovers(seeds, finished: set, hung: set, opts: Options | None = None,
              workdir: Path | None = None) -> list[Outcome]:
    """Outcomes for the seeds without one at the end: a hang fails the run, the others never
    started (the time limit). With ``opts`` and ``workdir`` a hang's kernel is generated and
    written again, so that its report holds the source (seed 55660's had none)."""
    out = []
    for seed in seeds:
        if seed in finished:
            continue
        if seed not in hung:
            out.append(Outcome(seed, status="not run", cls="time limit"))
            continue
        o = Outcome(seed, status="hang", cls=f"still running {HANG_SECONDS} s after the time "
                    "limit")
        if opts is not None and workdir is not None:
            try:
                program, known = harness.generate(seed, opts)
                o.kind, o.known = program.kind, frozenset(known)
                o.source = str(harness.write(program, seed, opts, workdir))
            except Exception:
                o.detail = "the kernel could not be generated again:\n" + traceback.format_exc()
        out.append(o)
    return out


def _cpu_worker():
    """Workers run the CPU side (reference, CPU backend, tensors for the GPU signature) even on
    a machine whose GPU would make cuda the default backend; they only compile for the GPU."""
    from fearless.runtime import device
    device.set_backend("cpu")


def run_device(seeds, opts: Options, jobs: int, workdir: Path, report, time_limit: float,
               stand_in: dict | None = None):
    """Device mode over ``seeds``; outcomes go to ``report``. Stops scheduling new seeds after
    ``time_limit`` seconds (``drain``, ``leftovers``: a compile still running HANG_SECONDS later
    is a hang, the seeds never started are not run). ``stand_in``: see ``gpu_process``."""
    ctx = mp.get_context("spawn")
    t0 = time.monotonic()
    gpu = GpuRunner(ctx, opts, workdir, stand_in)
    pool = ctx.Pool(jobs, initializer=_cpu_worker)
    task = partial(compile_task, opts=opts, workdir=workdir, arch=gpu.arch)
    finished, compiled, hung = set(), set(), set()

    def take(o: Outcome):
        compiled.add(o.seed)
        if o.status == "pass":
            gpu.send(o)
        else:
            report.add(o)
            finished.add(o.seed)

    try:
        results = pool.imap_unordered(task, seeds)
        for o in until(results, t0 + time_limit):
            if o is not None:
                take(o)
            for done in gpu.poll():
                report.add(done)
                finished.add(done.seed)
        hung = drain(results, seeds, compiled, jobs, take)
        pool.terminate()
        while gpu.sent and time.monotonic() - t0 < time_limit + 2 * HANG_SECONDS:
            for done in gpu.poll(timeout=1.0):
                report.add(done)
                finished.add(done.seed)
    except Exception:
        traceback.print_exc()
    finally:
        pool.terminate()
        gpu.stop()
    for o in leftovers(seeds, finished, hung, opts, workdir):
        report.add(o)
