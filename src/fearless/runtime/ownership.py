"""Who may use a buffer right now: live views, claims of pending operations, the execution lock.

Sits under ``tensor.py``, ``partition.py``, ``lazy.py`` and ``graph.py`` and knows neither
tensors nor operations: only byte ranges, weak references and labels.

* A ``Storage`` is shared by every Tensor over one allocation (a view made by indexing or ``.T``
  shares its parent's). It tracks the live Tensor handles over it and the NumPy arrays handed out
  by ``host_view()`` (both weakly), so ``partition()`` can demand sole ownership, and the
  ``Claim``s of pending operations and graphs.
* A ``Claim`` is a byte range ``[lo, hi)`` of a storage held by an owner (a DeviceOperation or a
  Graph, referenced weakly: an owner that is garbage-collected holds nothing). Kinds:
  ``READ`` (shared: others may read, nobody may write), ``WRITE`` (exclusive: nobody else may
  read or write) and ``PIN`` (a graph keeps pointers to the memory: any access is fine between
  replays, but the buffer cannot be partitioned).
* The execution lock: while an operation runs (``.sync()``, a ``.then()`` callback, a graph
  capture), synchronising calls (another ``.sync()``, ``Tensor.numpy()``, ``fl.synchronize()``)
  and eager launches are refused, as in cuda-async, so work cannot escape the operation's
  stream.

Limits: memory fearless did not allocate (a NumPy array, a torch tensor) gets a fresh Storage
each time it is wrapped, so views that other libraries hold are unknown here; so are pointers
taken from ``data_ptr()`` or ``__cuda_array_interface__``. Nothing here is thread-safe: share
tensors between threads only with your own locking.
"""
from __future__ import annotations

import threading
import weakref

from fearless.errors import LaunchError

READ, WRITE, PIN = "read", "write", "pin"
_EVERYTHING = (-(2**63), 2**63)


class Storage:
    """The memory behind one allocation or one wrapped foreign array, shared by its views."""

    __slots__ = ("claims", "home", "host_views", "views", "writer")

    def __init__(self):
        self.views = weakref.WeakSet()       # live Tensor handles over this memory
        self.host_views: list[weakref.ref] = []  # NumPy arrays from host_view() (unhashable)
        self.claims: list[Claim] = []
        self.writer = None  # (stream, its launch count) of the last enqueued write (stream.py)
        self.home = None    # the handle of the stream whose order frees this memory (fearless
        #                     allocations, memory.StreamOrdered); None: foreign or host memory

    def add_host_view(self, array) -> None:
        self.host_views = [r for r in self.host_views if r() is not None]
        self.host_views.append(weakref.ref(array))

    def has_host_views(self) -> bool:
        return bool(self.host_views) and any(r() is not None for r in self.host_views)

    def other_view(self, but) -> str | None:
        """The repr of a live (not moved) Tensor handle over this memory other than ``but``.

        A string, not the view: an error's traceback keeps its frames' locals alive, and a view
        kept alive there would block the next partition() too.
        """
        if len(self.views) <= 1:
            return None  # ``but`` alone (a live handle is in its storage's views)
        for v in list(self.views):
            if v is not but and v._moved is None:
                return repr(v)
        return None


class Claim:
    """A byte range of a storage held by an owner (weakly referenced) in one of the kinds."""

    __slots__ = ("hi", "kind", "lo", "owner", "storage")

    def __init__(self, storage: Storage, lo: int, hi: int, kind: str, owner):
        self.storage, self.lo, self.hi, self.kind = storage, lo, hi, kind
        self.owner = weakref.ref(owner)

    def describe(self) -> str:
        owner = self.owner()
        label = getattr(owner, "label", "a pending operation")
        verb = {READ: "reads", WRITE: "writes", PIN: "keeps pointers to"}[self.kind]
        return f"{label} {verb} this memory"


def _blocks(claim: Claim, access: str) -> bool:
    """Whether ``claim`` forbids ``access`` (READ, WRITE or "partition") of memory it covers."""
    if access == "partition":
        return True
    if claim.kind == PIN:
        return False
    return access == WRITE or claim.kind == WRITE


_held = [0]  # claims other than pins not yet dropped, in every storage (see any_held)


def any_held() -> bool:
    """Whether any READ or WRITE claim may exist (a pending operation or graph replay holds
    memory somewhere). False lets a graph replay skip its per-tensor checks: pins never
    forbid an access."""
    return _held[0] > 0


def conflict(storage: Storage, lo: int, hi: int, access: str, owner=None) -> Claim | None:
    """The first claim of another live owner that forbids ``access`` to ``[lo, hi)``, or None.

    ``access`` is READ, WRITE or ``"partition"`` (sole ownership of the whole storage). Claims
    whose owner was garbage-collected are dropped on the way.
    """
    claims = storage.claims
    if not claims:
        return None
    if access == "partition":
        lo, hi = _EVERYTHING
    for c in list(claims):
        holder = c.owner()
        if holder is None:
            drop(c)
        elif holder is not owner and c.lo < hi and lo < c.hi and _blocks(c, access):
            return c
    return None


def claim(storage: Storage, lo: int, hi: int, kind: str, owner) -> Claim:
    """Record a claim (the caller has checked ``conflict`` first)."""
    c = Claim(storage, lo, hi, kind, owner)
    storage.claims.append(c)
    if kind is not PIN:
        _held[0] += 1
    return c


def drop(c: Claim) -> None:
    """Release a claim; releasing twice is harmless."""
    try:
        c.storage.claims.remove(c)
    except ValueError:
        return
    if c.kind is not PIN:
        _held[0] -= 1


# -- the execution lock --------------------------------------------------------------------------
_local = threading.local()


def executing() -> bool:
    """True while this thread runs a DeviceOperation or captures a graph."""
    return getattr(_local, "executing", False)


def refuse_while_executing(what: str) -> None:
    """Raise LaunchError when ``what`` is attempted inside a running operation."""
    if executing():
        raise LaunchError(f"{what} inside a running DeviceOperation (a .then() callback or a "
                          "graph capture) is refused: it would escape the operation's stream",
                          help="return a DeviceOperation from the callback (kernel.op(...)) and "
                               "read results after the outer .sync()")


class _Execution:
    """The execution lock as a context manager (a class: cheaper per ``.sync()`` than a
    generator-based one)."""

    __slots__ = ()

    def __enter__(self):
        refuse_while_executing("running another DeviceOperation (.sync(), fl.graph())")
        _local.executing = True

    def __exit__(self, *exc):
        _local.executing = False


_EXECUTION = _Execution()


def execution() -> _Execution:
    """Hold the execution lock of this thread (refusing a nested one): ``with execution():``."""
    return _EXECUTION
