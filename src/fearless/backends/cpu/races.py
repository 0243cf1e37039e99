"""The cpu backend's dynamic race detector (on unless ``FEARLESS_RACECHECK=0``).

Shadow memory keeps, per element of every array that the compiler could not prove race-free
(shared arrays, UnsafeSlice and AtomicSlice parameters), the last plain writer, up to two
readers and the last atomic access since the element was last written: the thread (its linear
id in the launch), the barrier epoch of its block at the time, and the source site. Two accesses
by different threads conflict when at least one is a plain write (or one is atomic and the other
plain) and either they come from different blocks (nothing orders blocks within a launch) or
their block had passed the same number of barriers (nothing ordered them). Lanes of one op
that hit one element conflict with each other in the same way. DisjointSlice and read-only
arrays need no shadow: their accesses are race-free by construction.

The first conflict is kept and the launch raises it as a ``RaceError`` when it ends, naming
both source lines and both threads. Reference: the shadow-word scheme of Serebryany and
Iskhodzhanov, "ThreadSanitizer: data race detection in practice" (WBIA 2009), reduced to the
block-barrier happens-before of CUDA.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

READ, WRITE, ATOMIC = "reads", "writes", "atomically updates"


class _Shadow:
    """Access records of one array (or one batch of blocks' copies of a shared array)."""

    def __init__(self, size: int):
        def rec():
            return (np.full(size, -1, np.int64), np.zeros(size, np.int64),
                    np.zeros(size, np.int32))
        self.w, self.r1, self.r2, self.a = rec(), rec(), rec(), rec()


@dataclass
class Race:
    """One conflict: the later access (kind, thread, site) and the earlier one."""

    array: str
    element: tuple
    kind: str
    thread: int
    site: int
    other_kind: str
    other_thread: int
    other_site: int


class RaceDetector:
    """Shadow memory for one launch. ``per_block``: threads per block."""

    def __init__(self, per_block: int):
        self.per_block = per_block
        self.shadows: dict[int, _Shadow] = {}
        self.sites: list = []          # site number -> (op span)
        self.site_of: dict[int, int] = {}
        self.race: Race | None = None

    def site(self, op) -> int:
        k = self.site_of.get(id(op))
        if k is None:
            k = self.site_of[id(op)] = len(self.sites)
            self.sites.append(op.span)
        return k

    def shadow(self, key: int, size: int) -> _Shadow:
        s = self.shadows.get(key)
        if s is None or s.w[0].size != size:
            s = self.shadows[key] = _Shadow(size)
        return s

    def forget(self, key: int) -> None:
        self.shadows.pop(key, None)

    def _conflict(self, rec, elem, thread, epoch):
        t, e = rec[0][elem], rec[1][elem]
        other_block = (t // self.per_block) != (thread // self.per_block)
        return (t >= 0) & (t != thread) & (other_block | (e == epoch))

    def access(self, key: int, size: int, name: str, shape: tuple, op, kind: str,
               elem: np.ndarray, thread: np.ndarray, epoch: np.ndarray) -> None:
        """Record ``kind`` accesses by ``thread`` (one per lane) at flat ``elem``; ``shape``
        unravels an element for the message."""
        if elem.size == 0:
            return
        sh = self.shadow(key, size)
        site = self.site(op)
        if self.race is None:
            self._check(sh, name, shape, kind, site, elem, thread, epoch)
        if kind == WRITE:
            _put(sh.w, elem, thread, epoch, site)
            for rec in (sh.r1, sh.r2, sh.a):
                rec[0][elem] = -1
        elif kind == ATOMIC:
            _put(sh.a, elem, thread, epoch, site)
        else:
            r1 = sh.r1[0][elem]
            first = (r1 < 0) | (r1 == thread) | ((r1 // self.per_block == thread // self.per_block)
                                                 & (sh.r1[1][elem] != epoch))
            _put(sh.r1, elem[first], thread[first], epoch[first], site)
            _put(sh.r2, elem[~first], thread[~first], epoch[~first], site)
            # several lanes of this op reading one element: keep a second, different reader
            order = np.argsort(elem, kind="stable")
            e, t = elem[order], thread[order]
            dup = np.flatnonzero((e[1:] == e[:-1]) & (t[1:] != t[:-1]))
            if dup.size:
                _put(sh.r2, e[dup + 1], t[dup + 1], epoch[order][dup + 1], site)

    def _check(self, sh, name, shape, kind, site, elem, thread, epoch):
        against = {READ: ((sh.w, WRITE), (sh.a, ATOMIC)),
                   WRITE: ((sh.w, WRITE), (sh.r1, READ), (sh.r2, READ), (sh.a, ATOMIC)),
                   ATOMIC: ((sh.w, WRITE), (sh.r1, READ), (sh.r2, READ))}[kind]
        for rec, other_kind in against:
            hit = self._conflict(rec, elem, thread, epoch)
            if hit.any():
                k = int(np.argmax(hit))
                e = int(elem[k])
                self.race = Race(name, _unravel(e, shape), kind, int(thread[k]), site,
                                 other_kind, int(rec[0][e]), int(rec[2][e]))
                return
        if kind == WRITE:  # two lanes of this one store writing one element
            order = np.argsort(elem, kind="stable")
            e, t = elem[order], thread[order]
            dup = np.flatnonzero((e[1:] == e[:-1]) & (t[1:] != t[:-1]))
            if dup.size:
                k = dup[0]
                self.race = Race(name, _unravel(int(e[k]), shape), WRITE, int(t[k + 1]), site,
                                 WRITE, int(t[k]), site)

    def describe(self, thread_name) -> tuple[str, object]:
        """The message of the recorded race and the span of its later access."""
        r = self.race
        index = ", ".join(map(str, r.element))
        span, other = self.sites[r.site], self.sites[r.other_site]
        same_block = r.thread // self.per_block == r.other_thread // self.per_block
        why = "with no barrier in between" if same_block else \
            "from different blocks (barriers do not order blocks)"
        where = f"{other.location()}" if other is not None else "another line"
        text = (f"data race on '{r.array}' element [{index}]: {thread_name(r.thread)} "
                f"{r.kind} it here, and {thread_name(r.other_thread)} {r.other_kind} it at "
                f"{where} {why}")
        return text, span


def _put(rec, elem, thread, epoch, site) -> None:
    rec[0][elem], rec[1][elem], rec[2][elem] = thread, epoch, site


def _unravel(flat: int, shape: tuple) -> tuple:
    return tuple(int(i) for i in np.unravel_index(flat, shape)) if shape else (flat,)
