"""The measurement loop of ``ft.autotune`` and ``fl.autotune`` (``driver.py`` decides when it
runs): each config that fits and accepts the call runs on scratch twins of the written
arguments (its trial), is dropped when it fails or leaves an element of an output it must cover
unwritten; then the survivors are timed together, taking turns round after round, each timed
run after an L2 flush (``runtime/timing.interleaved_seconds``), and must agree. A time bound
skips the configs left once it is spent (after at least one passed its trial).

Progress on stderr, once the timing is done: one line per config tried, timed or dropped
(``fearless: tuning 'matmul' 3/24: config 2 Config(...): 41.7 us``) when
``FEARLESS_AUTOTUNE_PROGRESS=1``, or when it is unset, stderr is a terminal and
``FEARLESS_PROGRESS`` is not ``0`` (a log file gets only the summary); then one summary line
(``fearless: tuned 'matmul' over 24 configs in 31.2 s: config 5 ...``) unless
``FEARLESS_PROGRESS=0`` or ``FEARLESS_AUTOTUNE_PROGRESS=0``. Plain lines, no terminal control:
a compile's own progress line (``runtime/progress.py``) may come between two of them.
"""
from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from fearless.autotuning import flush
from fearless.autotuning.agreement import Agreement
from fearless.errors import AutotuneError, FearlessError, InternalError, OccupancyWarning
from fearless.kernel import base
from fearless.runtime import memory, timing
from fearless.runtime.tensor import Tensor, as_tensor, empty
from fearless.tracebacks import deferred_warnings, warn_user


@dataclass(frozen=True)
class Candidate:
    """One config's outcome in a tuning: its median ``seconds``, or why it was ``dropped``
    (failed, refused the arguments, did not fit them) or ``skipped`` (the time bound), and
    the ``warnings`` of its compile (messages; only the winner's reach ``warnings.warn``)."""

    config: object
    seconds: float | None = None
    dropped: str | None = None
    skipped: str | None = None
    warnings: tuple = ()


@dataclass(frozen=True)
class Report(Sequence):
    """A tuning: its ``candidates`` in config order (the report indexes and iterates as
    them), the ``key`` it tuned (its parameters, readable), the wall-clock ``seconds`` it took
    (compiles, trial runs, timing), the ``winner`` (a config index; None when it failed) and
    the time bound it ran under (``budget``, seconds, or None)."""

    key: str
    candidates: tuple
    seconds: float
    winner: int | None = None
    budget: float | None = None

    def __getitem__(self, index):
        return self.candidates[index]

    def __len__(self) -> int:
        return len(self.candidates)

    def __str__(self) -> str:
        lines = [f"tuned {self.key or 'the call'} in {self.seconds:.1f} s"
                 + (f" (bound {self.budget:g} s)" if self.budget is not None else "")]
        for n, c in enumerate(self.candidates):
            what = f"{c.seconds * 1e6:.1f} us" if c.seconds is not None else \
                f"dropped: {c.dropped}" if c.dropped is not None else f"skipped: {c.skipped}"
            mark = "*" if n == self.winner else " "
            lines.append(f"{mark} config {n} {c.config!r}: {what}")
            lines.extend(f"    warned: {w.splitlines()[0]}" for w in c.warnings)
        return "\n".join(lines)


def tune(tuned, bound: dict, fits: list, unfit: dict, label: str, budget: float | None) -> list:
    """Tune ``tuned`` (a ``driver.Tuned``) over the configs ``fits`` for the real
    arguments ``bound`` (``unfit``: {config: why} of the rest) within ``budget`` seconds;
    returns the timed configs, fastest first, and sets ``tuned.report``. Raises the first
    config's error when none accepts the arguments, AutotuneError when every config fails or
    two disagree."""
    start = time.perf_counter()
    if budget is None:   # under a bound the configs compile one by one, so it can stop them
        _keep(tuned, tuned._precompile([n for n in fits if n not in unfit], bound))
    refused: dict = {}
    for checked in fits:   # the real call's own checks first: up to a config that accepts
        with deferred_warnings() as own:
            exc = tuned._refusal(checked, bound)
        _keep(tuned, {checked: own})
        if exc is None:
            break
        refused[checked] = exc
    else:
        raise next(iter(refused.values()))
    _check_contiguous(tuned, bound)
    progress = _Progress(tuned.name, len(tuned.configs))
    candidates, survivors, tried = [], set(), []
    agreement = Agreement(tuned)
    for n, cfg in enumerate(tuned.configs):
        if n in unfit:
            candidates.append(Candidate(cfg, dropped=unfit[n]))
            continue
        if survivors and budget is not None and time.perf_counter() - start >= budget:
            candidates.append(Candidate(cfg, skipped=f"the time bound of {budget:g} s was "
                                                     f"spent"))
            continue
        with deferred_warnings() as own:   # a compile not done ahead warns here
            exc = refused.get(n) if n <= checked else tuned._refusal(n, bound)
            c = Candidate(cfg, dropped=f"refuses these arguments ({_line(exc)})") \
                if exc is not None else _try(tuned, n, bound, survivors, agreement)
        _keep(tuned, {n: own})
        candidates.append(replace(c, warnings=tuple(
            m for m, _ in tuned.compile_warnings.get(n, ()))))
        tried.append(n)
    timed = _time(tuned, bound, survivors, candidates)
    for n in tried:
        progress.candidate(n, candidates[n])
    report = Report(label, tuple(candidates), time.perf_counter() - start, None, budget)
    tuned.report = report
    if not timed:
        lines = "\n".join(f"  config {n} {c.config!r}: {c.dropped or c.skipped}"
                          for n, c in enumerate(candidates))
        raise AutotuneError(f"every config failed:\n{lines}", kernel=tuned.name)
    agreement.check(timed)
    ranking = sorted(timed, key=timed.get)
    tuned.report = replace(report, winner=ranking[0])
    progress.done(tuned.report, timed[ranking[0]])
    _warn(tuned, ranking[0])
    return ranking


def _keep(tuned, said: dict) -> None:
    """Add {config: [(message, category)]} to ``tuned.compile_warnings``, each message once,
    but an OccupancyWarning (about the trial's shape, not the compile)."""
    for n, pairs in said.items():
        kept = tuned.compile_warnings.setdefault(n, [])
        for pair in pairs:
            if pair not in kept and not issubclass(pair[1], OccupancyWarning):
                kept.append(pair)


def _warn(tuned, n: int) -> None:
    """Give config n's compile warnings to the caller (at its line). A slow config that lost
    (spills, lost facts) is the tuning's business, in its report; the one that runs is the
    caller's: its warnings say why the kernel they run is slow."""
    for message, category in tuned.compile_warnings.get(n, ()):
        warn_user(message, category)


def _try(tuned, n: int, bound: dict, survivors: set, agreement: Agreement) -> Candidate:
    """Config n's trial: its Candidate, timed later (``_time``); when it survives, n joins
    ``survivors`` and its outputs go to ``agreement``. Which outputs it reads is config n's own
    (a config that reads an output must not spare another that only writes part of it the
    coverage check)."""
    cfg = tuned.configs[n]
    try:
        result = _trial(tuned, n, bound, tuned._outs_read(bound, n), tuned._outs_stored(bound, n))
    except InternalError:
        raise
    except FearlessError as exc:
        return Candidate(cfg, dropped=f"{type(exc).__name__}: {_line(exc)}")
    if isinstance(result, str):
        return Candidate(cfg, dropped=result)
    survivors.add(n)
    agreement.add(n, result)
    return Candidate(cfg)


def _time(tuned, bound: dict, survivors: set, candidates: list) -> dict:
    """Time the configs that passed their trials (``survivors``) in interleaved rounds,
    each timed run after an L2 flush (``runtime/timing.interleaved_seconds``), on twins of the
    written arguments. Fills in their seconds in ``candidates``, or drops a config whose timed
    run raised alone (the rest are then timed again without it; an error no config raises
    alone propagates); returns {config: seconds}."""
    order = sorted(survivors)
    read = set().union(*(tuned._outs_read(bound, n) for n in order))
    before = flush.l2_flush()
    if before is not None and order:
        before()   # once alone: a failure of the flush is not blamed on a config
    while order:
        try:
            seconds = _rounds(tuned, order, bound, read, tuned.reps, before)
        except InternalError:
            raise
        except FearlessError as exc:
            bad = next((n for n in order if _raises(tuned, n, bound, read, before)), None)
            if bad is None:
                raise
            candidates[bad] = replace(candidates[bad],
                                      dropped=f"{type(exc).__name__}: {_line(exc)}")
            order.remove(bad)
            continue
        for n, s in zip(order, seconds):
            candidates[n] = replace(candidates[n], seconds=s)
        return dict(zip(order, seconds))
    return {}


def _rounds(tuned, order: list, bound: dict, read: set, rounds: int, before) -> list:
    """Median seconds of each config of ``order`` over ``rounds`` interleaved rounds, each run
    on fresh twins: as in the trials, only an output some config reads starts as a copy (the
    rest of the real outputs may be memory nothing has written yet: compute-sanitizer's
    initcheck)."""
    def prepare(n: int):
        twins = {name: twin(bound[name], copy=name in read or name not in tuned.outs)
                 for name in tuned.written}
        return lambda: tuned._enqueue(n, bound, twins)

    return timing.interleaved_seconds([lambda n=n: prepare(n) for n in order], rounds, before)


def _raises(tuned, n: int, bound: dict, read: set, before) -> bool:
    """Whether config n's timed run alone raises a FearlessError."""
    try:
        _rounds(tuned, [n], bound, read, 1, before)
    except InternalError:
        raise
    except FearlessError:
        return True
    return False


def covers(tuned, n: int, bound: dict) -> bool:
    """Whether config n runs on twins of ``bound`` and writes every element of each Out it
    must cover (``_trial``'s check), running nothing on the real arguments. (The caller,
    ``driver.Tuned._covers``, first takes a config whose IR proves it covers without this.)"""
    try:
        read, stored = tuned._outs_read(bound, n), tuned._outs_stored(bound, n)
        return not isinstance(_trial(tuned, n, bound, read, stored), str)
    except InternalError:
        raise
    except FearlessError:
        return False


def _line(exc: Exception) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]


def _check_contiguous(tuned, bound: dict) -> None:
    for name in tuned.written:
        t = bound[name] if isinstance(bound[name], Tensor) else as_tensor(bound[name])
        if not t.is_contiguous():
            raise AutotuneError(f"tuning needs contiguous written arguments; "
                                f"'{name}' has strides {t.strides}", kernel=tuned.name,
                                param=name, help="tune on a contiguous tensor of its "
                                                 "shape, or pass a contiguous copy")


def _trial(tuned, n: int, bound: dict, read: set, stored: set):
    """Config n's results on fresh twins (name -> host array), or why it is dropped: an
    output it must cover, does not read (``tuned.outs``, ``tuned._outs_read``) and is not
    known to store whole (``tuned._outs_stored``) runs from zero bytes and from one bytes,
    and an element holding the fill after both was never written. The other written
    arguments start as copies of the real ones."""
    checked = [o for o in tuned.outs if o not in read and o not in stored]
    fills = (0x00, 0xFF) if checked else (0x00,)
    runs = []
    for fill in fills:
        twins = {name: twin(bound[name], copy=name in read or name not in tuned.outs,
                            fill=fill) for name in tuned.written}
        tuned._enqueue(n, bound, twins)
        runs.append({name: twins[name].numpy() for name in tuned.written})
    for name in checked:
        zero, one = (_bits(run[name]) for run in runs)
        unwritten = (zero == 0) & (one == np.iinfo(one.dtype).max)
        if unwritten.any():
            return (f"leaves {int(unwritten.sum())} of the {unwritten.size} elements of "
                    f"'{name}' unwritten")
    return runs[0]


def twin(t, copy: bool, fill: int = 0) -> Tensor:
    """A scratch tensor of ``t``'s shape, dtype and 16-byte alignment class: a copy of ``t``,
    or every byte ``fill``."""
    t = t if isinstance(t, Tensor) else as_tensor(t)
    item = t.itemsize
    pad = 256 // item
    buf = empty(t.size + pad, t.dtype)
    want = t.data_ptr() % 256 if t.size else 0
    start = ((want - buf.data_ptr() % 256) % 256) // item
    out = buf[start:start + t.size].reshape(t.shape)
    del buf
    if copy:
        if t.backend == "cuda":
            memory.copy_device_to_device(out.data_ptr(), t.data_ptr(), t.nbytes)
        else:
            view = out.host_view()
            view[...] = t.numpy()
            del view
    elif t.backend == "cuda":
        memory.memset(out.data_ptr(), fill, t.nbytes)
    else:
        view = out.host_view()
        view.view(np.uint8)[...] = fill
        del view
    return out


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view({1: np.uint8, 2: np.uint16, 4: np.uint32,
                                         8: np.uint64}[a.dtype.itemsize])


class _Progress:
    """The lines a tuning prints on stderr (see the module docstring)."""

    def __init__(self, name: str, total: int):
        cfg = base.CONFIG
        self.name, self.total, self.count = name, total, 0
        stream = sys.stderr
        self.lines = cfg.autotune_progress if cfg.autotune_progress is not None else (
            cfg.progress and stream is not None and getattr(stream, "isatty", bool)())
        self.summary = cfg.progress and cfg.autotune_progress is not False

    def candidate(self, n: int, c: Candidate) -> None:
        self.count += 1
        if self.lines:
            what = f"{c.seconds * 1e6:.1f} us" if c.seconds is not None else \
                f"dropped ({c.dropped})"
            _write(f"fearless: tuning '{self.name}' {self.count}/{self.total}: config {n} "
                   f"{c.config!r}: {what}")

    def done(self, report: Report, best: float) -> None:
        if not self.summary:
            return
        n = report.winner
        dropped = sum(c.dropped is not None for c in report)
        skipped = sum(c.skipped is not None for c in report)
        notes = [f"{k} {word}" for k, word in ((dropped, "dropped"), (skipped, "skipped"))
                 if k]
        _write(f"fearless: tuned '{self.name}' over {self.total} configs in "
               f"{report.seconds:.1f} s: config {n} {report[n].config!r} ({best * 1e6:.1f} us)"
               + (f"; {', '.join(notes)} (see .report)" if notes else ""))


def _write(line: str) -> None:
    stream = sys.stderr
    if stream is not None:   # pythonw and some embedders have no stderr
        stream.write(line + "\n")
        stream.flush()
