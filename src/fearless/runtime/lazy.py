"""Lazy device operations: work that owns its arguments until ``.sync()`` hands them back.

The Python answer to cuda-async's ``DeviceOp`` (cutile-rs). A launcher checks a launch, then
returns a DeviceOperation instead of enqueuing; nothing touches the device until ``.sync()``
or ``.sync_on(stream)``, which enqueue the work, synchronise the stream, run the deferred checks
(a ``KernelBoundsError`` surfaces there) and return the result: for a kernel call, the tuple of
its arguments ("you get back what you put in"). ``.enqueue()`` is the eager form: it enqueues
on the current stream and returns the result at once, ownership back at once, the arguments
leased to the stream as an eager ``kernel[launch](...)``'s are (stream order keeps later work
on that stream safe; ``stream.check_order`` refuses unordered use from another stream).
Operations compose: ``op.then(f)`` and ``fl.zip(a, b, ...)`` run on one stream, in order;
``fl.graph(op)`` (``graph.py``) captures one to replay.

Ownership while an operation is pending (created and not yet synced, cancelled or dropped):

* a Partition argument is moved into it: any use raises MovedError until the sync;
* a tensor it writes (a SIMT ``DisjointSlice`` argument passed as a plain tensor) is held
  exclusively: reading, writing, exporting or partitioning any view of that memory raises
  AliasError;
* a tensor it only reads is shared: it may still be read (``numpy()``, a read-only
  ``host_view()``, an input of other kernels), but writing it (as another kernel's output or
  through DLPack/CAI) or partitioning it raises AliasError.

It gives everything back when it is synced (even when the sync raises: the stream is drained
first), enqueued, cancelled (``op.cancel()``) or garbage-collected; an operation that is kept
but never synced holds its arguments for as long as it lives. Ownership is tracked per thread,
without locks: do not share pending operations between threads.

The execution lock: while an operation runs (its enqueue, ``.then()`` callbacks, a graph
capture) another ``.sync()``, ``Tensor.numpy()``, ``fl.synchronize()`` or an eager
``kernel[launch](...)`` raises LaunchError. A ``.then()`` callback receives the previous result
with ownership (the previous operations' claims end there: work on the same stream is ordered
after them) and returns the next DeviceOperation, or a plain value.

Internal API for launchers (the tile-kernel launcher, ``Kernel.op``):

* From a Partition ``p``: ``p._launch_tensor()`` -> the Tensor to launch on (``data_ptr()``,
  ``shape``, ``strides`` in elements, ``dtype``, ``byte_extent()``); MovedError when ``p`` is
  held or ended. ``p.tile_shape`` (tuple, one entry per axis) and ``p.grid`` (3 ints, x from
  dim0) are public.
* Check everything first (shapes, dtypes, aliasing through ``launch.check_arguments``, which
  also refuses moved tensors and claimed memory), then build
  ``DeviceOperation(enqueue, result, reads=[...], writes=[...], partitions=[...],
  label="kernel 'name'")``: ``enqueue(stream)`` puts the work on ``stream`` (a fearless
  ``Stream``) without waiting, and may register ``stream.defer(check)``; ``result`` is what
  ``.sync()`` returns (the caller's argument tuple); ``reads``/``writes`` are Tensors,
  ``partitions`` the Partitions passed. The constructor takes ownership at once and raises
  MovedError/AliasError, holding nothing, when it cannot.
* The same ``enqueue`` may run inside a CUDA graph capture on another stream, or (cpu backend)
  be recorded and called again at each replay: read pointers and host views at call time.
"""
from __future__ import annotations

import warnings

import contextlib
from collections.abc import Callable
from itertools import chain
from typing import Any

import numpy as np

from fearless.errors import MovedError
from fearless.runtime import ownership
from fearless.runtime.partition import Partition
from fearless.runtime.stream import Stream, current_stream, refuse_while_capturing
from fearless.runtime.tensor import Tensor
from fearless.tracebacks import user_facing

PENDING, CONSUMED, DONE, CANCELLED, FAILED = "pending", "consumed", "done", "cancelled", "failed"
_LEAF, _THEN, _ZIP = "leaf", "then", "zip"


class _Execution:
    """One run of an operation tree on one stream: the leaves that ran and still hold claims.

    ``recorder``: a list when capturing on the cpu backend; leaves append their enqueue
    functions there instead of calling them.
    """

    def __init__(self, stream: Stream, recorder: list | None = None):
        self.stream, self.recorder = stream, recorder
        self.ran: list[DeviceOperation] = []       # every leaf that ran, in order
        self.released = 0                          # ran[:released] gave their claims back
        self.spawned: list[DeviceOperation] = []   # operations returned by .then() callbacks

    def hand_over(self) -> None:
        """The leaves that ran so far give their claims back (to a ``.then()`` callback)."""
        for op in self.ran[self.released:]:
            op._release()
        self.released = len(self.ran)

    def release_all(self, root: DeviceOperation) -> None:
        for op in (root, *self.spawned):
            op._release_tree()


_NOTHING_TO_HOLD = (bool, int, float, complex, np.generic, type(None))


def _held_by_stream(ops, handle) -> list:
    """What a stream must keep alive until the GPU has run ``ops`` (enqueued leaves): of each
    leaf's arguments (its result tuple, and the tensors it declared it reads, writes and
    partitions), those whose memory is not freed in this stream's order: foreign arrays
    (torch, CuPy, NumPy), fearless memory allocated on another stream. A leaf whose result is
    not its argument tuple is kept whole. Fearless memory allocated on
    this stream (``Storage.home``) needs nothing: dropped, it is freed behind the launches
    already enqueued (``memory.StreamOrdered``), so a model's temporaries go back to the pool
    as Python drops them while the GPU is still behind (kept until the GPU caught up, a
    Llama-3.1-8B prefill of 16 x 1024 tokens held every layer's activations: 80 GB)."""
    held = []
    for op in ops:
        args = op._result
        if type(args) is not tuple:
            held.append(op)
            continue
        for v in chain(args, op._reads, op._writes, op._partitions):
            t = v._tensor if type(v) is Partition else v
            if type(t) is Tensor:
                if t._storage.home != handle:
                    held.append(t)
            elif not isinstance(v, _NOTHING_TO_HOLD):
                held.append(v)
    return held


def _lease(stream: Stream, ops) -> None:
    """Lease to ``stream`` what it must hold for the enqueued leaves ``ops``."""
    held = _held_by_stream(ops, stream.handle)
    if held:
        stream.lease(held)


class DeviceOperation:
    """Work on the device that owns its arguments until it runs. See the module docstring.

    Launchers build them (``kernel.op(launch, *args)``); users ``sync()`` them, chain them with
    ``then``, combine them with ``fl.zip``, capture them with ``fl.graph``.
    """

    __slots__ = ("__weakref__", "_children", "_claims", "_enqueue", "_fn", "_kind", "_partitions",
                 "_reads", "_result", "_state", "_where", "_writes", "label")

    def __init__(self, enqueue: Callable[[Stream], None], result=None, *, reads=(), writes=(),
                 partitions=(), label: str = "an operation"):
        self.label = f"a pending DeviceOperation ({label})"
        self._kind, self._state, self._where = _LEAF, PENDING, None
        self._enqueue, self._result, self._fn, self._children = enqueue, result, None, ()
        self._reads, self._writes = unique_tensors(reads), unique_tensors(writes)
        self._partitions = list(partitions)
        self._claims: list = []
        self._acquire()

    def __del__(self):
        # Lazy is the point, but work that was built and never run is almost always a missing
        # .sync(): say so (ownership has already come back: the claims are weak references).
        if getattr(self, "_state", None) == PENDING:
            try:
                for c in getattr(self, "_claims", ()):  # now, not when a check finds it dead
                    ownership.drop(c)
                warnings.warn(f"{self.label} was dropped without .sync() or .cancel(): its work "
                              "never ran", RuntimeWarning, stacklevel=2)
            except Exception:  # noqa: BLE001 - interpreter shutdown: nothing left to tell
                pass

    @property
    def give_back_hint(self) -> str:
        return "its .sync() gives ownership back (op.cancel() without running it)"

    @classmethod
    def _composite(cls, kind: str, children, fn=None, label: str = "") -> DeviceOperation:
        op = cls.__new__(cls)
        op.label = f"a pending DeviceOperation ({label})"
        op._kind, op._state, op._where = kind, PENDING, None
        op._enqueue, op._result, op._fn, op._children = None, None, fn, tuple(children)
        op._reads, op._writes, op._partitions, op._claims = [], [], [], []
        return op

    def __repr__(self) -> str:
        return f"<DeviceOperation {self.label[len('a pending DeviceOperation '):]} {self._state}>"

    # -- ownership ---------------------------------------------------------------------------
    def _acquire(self) -> None:
        try:
            for p in self._partitions:
                p._hold(self)
            for tensors, kind in ((self._writes, ownership.WRITE), (self._reads, ownership.READ)):
                for t in tensors:
                    t._check_use(kind, "pass it to an operation", owner=self)
                    self._claims.append(ownership.claim(t._storage, *t.byte_extent(), kind, self))
        except BaseException:
            self._release()
            raise

    def _release(self) -> None:
        for c in self._claims:
            ownership.drop(c)
        self._claims = []
        for p in self._partitions:
            p._give_back(self)

    def _release_tree(self) -> None:
        todo = [self]  # iterative: a .then() chain of thousands of links is that deep
        while todo:
            op = todo.pop()
            op._release()
            todo.extend(op._children)

    def _refuse(self, action: str):
        why = {CONSUMED: f"was moved into {self._where}; run that instead",
               DONE: "already ran: its .sync() returned the result, and an operation runs once",
               CANCELLED: "was cancelled; its arguments were given back",
               FAILED: "failed when it ran; its arguments were given back"}[self._state]
        raise MovedError(f"cannot {action}: this DeviceOperation {why}",
                         help="build a new operation to run the work again, or capture one with "
                              "fl.graph(op) to replay it")

    def _consume(self, where: str) -> None:
        """Move this pending operation into a chain, a zip or a graph."""
        if self._state != PENDING:
            self._refuse(f"move it into {where}")
        self._state, self._where = CONSUMED, where

    # -- running -----------------------------------------------------------------------------
    def _submit(self, stream: Stream) -> None:
        """Put this leaf's work on ``stream``; inside ``fl.capture()`` the capture records it
        (with what it touches, for the graph to pin)."""
        capture = stream.capture
        if capture is None:
            self._enqueue(stream)
        else:
            capture.add(stream, self._enqueue, self._reads,
                        self._writes + [p._tensor for p in self._partitions], self)

    def _execute(self, ex: _Execution):
        """Enqueue the tree on ``ex.stream`` in order; returns the result (nothing waited)."""
        if self._kind == _LEAF:
            if ex.recorder is not None:
                ex.recorder.append(self._enqueue)
            else:
                self._submit(ex.stream)
            ex.ran.append(self)
            return self._result
        if self._kind == _ZIP:
            return tuple(op._execute(ex) for op in self._children)
        # a .then() chain nests to the left, one link per call: walk it in a loop, not by
        # recursion, so that chains of thousands of links run
        links, base = [], self
        while base._kind == _THEN:
            links.append(base)
            base = base._children[0]
        value = base._execute(ex)
        for link in reversed(links):
            ex.hand_over()
            nxt = link._fn(value)
            if isinstance(nxt, DeviceOperation):
                nxt._consume("a .then() chain")
                ex.spawned.append(nxt)
                nxt = nxt._execute(ex)
            value = nxt
        return value

    @user_facing
    def enqueue(self) -> Any:
        """Enqueue on the current stream and return the result at once, without waiting, as an
        eager ``kernel[launch](...)`` does: ownership comes back now, and stream order makes
        its use safe. The result's Partitions and tensors are usable at once by later work on
        the same stream; a launch on another stream that uses what this one writes, unordered,
        is a StreamOrderError; ``Tensor.numpy()`` waits for the work (it synchronises); a
        ``KernelBoundsError`` surfaces at the stream's next synchronisation. The arguments are
        leased to the stream (kept alive until the GPU is done with them). The cpu backend runs
        the work now. Inside ``fl.capture()`` the work is captured instead.

        Raises MovedError when the operation is not pending, LaunchError inside a running
        operation, and what the enqueue raises (StreamOrderError, a cpu RaceError) with the
        arguments given back.
        """
        if self._state != PENDING:
            self._refuse("enqueue it")
        if getattr(ownership._local, "executing", False):
            ownership.refuse_while_executing("DeviceOperation.enqueue()")
        stream = current_stream()
        self._state = DONE
        if self._kind == _LEAF:
            try:
                self._submit(stream)
            except BaseException:
                self._state = FAILED
                raise
            finally:
                self._release()
                _lease(stream, (self,))
            return self._result
        with ownership.execution():  # .then() callbacks run here: nothing may escape the stream
            ex = _Execution(stream)
            try:
                return self._execute(ex)
            except BaseException:
                self._state = FAILED
                raise
            finally:
                ex.release_all(self)
                _lease(stream, ex.ran)

    @user_facing
    def sync(self) -> Any:
        """Run on the current stream, wait, and return the result (ownership comes back)."""
        return self._sync(current_stream(), True)

    @user_facing
    def sync_on(self, stream: Stream) -> Any:
        """Run on ``stream``: enqueue, synchronise, run deferred checks, return the result.

        ``stream`` is ordered after the work already on the current stream. Raises MovedError
        when this operation already ran or was moved, LaunchError inside another running
        operation, and whatever the work raises (a ``KernelBoundsError`` from the deferred
        checks); in every case the arguments are given back first.
        """
        return self._sync(stream, False)

    def _sync(self, stream: Stream, current: bool) -> Any:
        """``sync_on(stream)``; ``current``: ``stream`` is the current stream (no ordering to
        add)."""
        if self._state != PENDING:
            self._refuse("sync it")
        refuse_while_capturing("DeviceOperation.sync(), which waits,")
        with ownership.execution():
            self._state = DONE
            ex = _Execution(stream)
            try:
                if not current:
                    _order_after_current(stream)
                value = self._execute(ex)
            except BaseException:
                self._state = FAILED
                _drain(stream)
                ex.release_all(self)
                raise
            try:
                stream.synchronize()
            finally:
                ex.release_all(self)
        return value

    @user_facing
    def cancel(self) -> Any:
        """Give the arguments back without running anything. Returns the result a launcher gave
        (for ``kernel.op``: the arguments), a tuple of those for ``fl.zip``, None for a
        ``.then()`` chain. Raises MovedError when the operation is not pending."""
        if self._state != PENDING:
            self._refuse("cancel it")
        self._state = CANCELLED
        return self._cancel_tree()

    def _cancel_tree(self):
        node = self
        while node._kind == _THEN:  # iterative along a .then() chain (see _execute)
            node._state = CANCELLED
            node._release()
            node = node._children[0]
        node._state = CANCELLED
        node._release()
        if node._kind == _LEAF:
            value = node._result
        else:
            value = tuple(child._cancel_tree() for child in node._children)
        return value if node is self else None

    # -- combinators -------------------------------------------------------------------------
    @user_facing
    def then(self, f: Callable) -> DeviceOperation:
        """An operation that runs this one, calls ``f(result)`` and runs the DeviceOperation
        ``f`` returns on the same stream, after it; its result is that operation's result (or
        ``f``'s return value when that is not an operation). ``f`` runs inside the execution
        lock, at run time (once, at capture, inside a graph). This operation is moved in."""
        self._consume("a .then() chain")
        return DeviceOperation._composite(_THEN, (self,), f, label="a .then() chain")

    def first(self) -> DeviceOperation:
        """This operation with only the first element of its (tuple) result."""
        return self.then(lambda result: result[0])

    def last(self) -> DeviceOperation:
        """This operation with only the last element of its (tuple) result."""
        return self.then(lambda result: result[-1])


@user_facing
def zip(*ops: DeviceOperation) -> DeviceOperation:
    """One operation running ``ops`` in order on one stream; its result is the tuple of their
    results. Each is moved in; MovedError when one is not pending or appears twice."""
    if not ops or not all(isinstance(op, DeviceOperation) for op in ops):
        raise TypeError("fl.zip() takes one or more DeviceOperations")
    if len({id(op) for op in ops}) != len(ops):
        raise MovedError("cannot zip an operation with itself: an operation runs once")
    for op in ops:
        if op._state != PENDING:
            op._refuse("move it into fl.zip()")
    for op in ops:
        op._consume("fl.zip()")
    return DeviceOperation._composite(_ZIP, ops, label="fl.zip()")


def unique_tensors(tensors) -> list:
    """``tensors`` without repeats of one memory range: an operation (or a graph) that touches
    a tensor many times claims it once, so claiming stays linear in the distinct tensors."""
    if type(tensors) is list and (len(tensors) <= 1 or len(tensors) == 2 and
                                  tensors[0]._storage is not tensors[1]._storage):
        return list(tensors)  # the common cases: nothing to compare, or distinct memory
    seen, out = set(), []
    for t in tensors:
        key = (id(t._storage), t.byte_extent())
        if key not in seen:
            seen.add(key)
            out.append(t)
    return out


def _order_after_current(stream: Stream) -> None:
    """Make ``stream`` wait for the work already enqueued on the current stream (eager launches,
    copies) so that an operation run on another stream sees their results."""
    current = current_stream()
    if stream is not current and stream.core is not None and current.core is not None:
        stream.wait(current)


def _drain(stream: Stream) -> None:
    """Let whatever a failed run enqueued finish before its arguments are given back."""
    with contextlib.suppress(Exception):  # the run's own error is the one to report
        stream.synchronize()
