"""Streams and events: where launches and copies are enqueued, where deferred errors surface,
and how long the buffers of enqueued work are kept alive.

``fl.Stream()`` makes a stream (on cuda a new non-blocking CUDA stream; on cpu, where work runs
as it is launched, an ordering label). ``with fl.stream(s):`` sends the launches, copies and
operations in its body to ``s``: a fearless Stream, a ``torch.cuda.Stream``, a CuPy stream, or any
object with ``__cuda_stream__`` (the CUDA stream protocol: ``(version, handle)``). Outside such a
block the current stream is PyTorch's current stream when torch has initialised CUDA (so that
fearless kernels inside ``with torch.cuda.stream(s):`` are ordered with the torch work around
them, as Triton's are), else the device's legacy default stream.

Deferred checks: a launch registers checks on its stream (reading the bounds-error word);
``synchronize()`` waits for the device and then runs them, so a ``KernelBoundsError`` surfaces at
the next synchronisation of its stream on both backends alike.

Leases: ``lease(obj)`` keeps ``obj`` (a launch's arguments) alive until the GPU has finished the
work enqueued before it. Leases are grouped: every ``LEASE_BATCH`` leases one event is recorded
(``cuEventRecord``) and the group is released once that event has completed (polled at the next
group, ``cuEventQuery``) or the stream is synchronised, so a launch pays a list append, not an
event. ``fl.Event`` records a point of a stream; ``s.wait(e)`` (or ``s.wait(other_stream)``)
orders ``s``'s later work after it.

Ordering: each stream counts the launches that write fearless tensors (``seq``); a write records
``(stream, seq)`` on the tensor's storage (``ownership.Storage.writer``). A later launch on
another stream that uses the tensor must be ordered after that write: the writer stream was
synchronised since (``done``), or the using stream waited for an event recorded after it
(``Stream.wait``; what the writer stream had waited for comes along, so ordering is
transitive). Otherwise ``check_order`` raises StreamOrderError before anything is enqueued.
Limits: memory fearless did not allocate (torch, CuPy) is not tracked, since its producers
order it through their own streams, and neither is ordering made outside fearless (a torch
event wait between torch streams): say it with ``fl.Event`` and ``Stream.wait`` instead.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
import weakref
from collections import deque
from typing import Callable

from fearless.errors import LaunchError, StreamOrderError
from fearless.runtime import device, ownership
from fearless.tracebacks import user_facing

LEASE_BATCH = 64  # leases per recorded event: one cuEventRecord per 64 launches
LEGACY = 1  # CU_STREAM_LEGACY: fearless's default stream; torch and CuPy name it 0


class Stream:
    """An ordered queue of GPU work. ``handle`` is the CUstream as an int (0: the legacy
    default stream, and every stream of the cpu backend).

    ``Stream()`` makes a new stream on the current backend. Wrapping another library's stream:
    ``with fl.stream(torch_stream):`` (see the module docstring)."""

    def __init__(self, core=None, *, _wrap: bool = False, _leases: bool = True):
        if not _wrap and core is None and device.current_backend() == "cuda":
            from cuda.core import StreamOptions
            core = device.cuda_device().create_stream(options=StreamOptions(nonblocking=True))
        self.core = core
        self.handle = 0 if core is None else int(core.handle)
        self._leases = _leases and core is not None  # a graph capture's stream: the graph pins
        self._deferred: list[Callable[[], None]] = []
        self._batch: list = []
        self._held: deque = deque()  # (event, leased objects) in recording order
        self.seq = 0            # writes of fearless tensors enqueued here (see check_order)
        self.done = 0           # seq as of the last synchronisation
        self.seen: dict = {}    # other stream -> its seq this stream is ordered after
        self.capture = None     # the fl.capture() recording this stream's work (capture.py)
        _all.add(self)

    def __del__(self):
        try:
            _retired[0] += self.seq
        except Exception:  # noqa: BLE001 - interpreter shutdown: nothing left to count
            pass

    def defer(self, check: Callable[[], None]) -> None:
        """Run ``check`` after the next synchronisation of this stream (it may raise)."""
        self._deferred.append(check)

    def lease(self, obj) -> None:
        """Keep ``obj`` alive until the GPU has finished this stream's work enqueued so far."""
        if not self._leases:
            return  # the cpu backend (the work has finished), or a graph capture (it pins)
        self._batch.append(obj)
        if len(self._batch) >= LEASE_BATCH:
            self._seal()

    def _seal(self) -> None:
        while self._held and _events.done(self._held[0][0]):
            _events.give_back(self._held.popleft()[0])
        self._held.append((_events.record(self.handle), self._batch))
        self._batch = []

    def wait(self, other) -> None:
        """Order this stream's later work after ``other``: an ``Event`` (its recorded point) or
        a Stream (everything enqueued on it so far). Raises LaunchError inside an
        ``fl.capture()`` block (a graph's work is ordered by where it is replayed)."""
        refuse_while_capturing("Stream.wait()")
        if isinstance(other, Stream):
            other = Event(other)
        if not isinstance(other, Event):
            raise TypeError(f"Stream.wait takes a fearless Event or Stream, got "
                            f"{type(other).__name__}")
        if self.handle != other.stream.handle and other.handle is not None:
            _events.wait(self.handle, other.handle)
        for stream, seq in other.knows.items():
            if self.seen.get(stream, -1) < seq:
                self.seen[stream] = seq

    def synchronize(self) -> None:
        """Wait for all enqueued work, release the leases, then run the deferred checks (first
        error wins). Raises LaunchError on the stream of an ``fl.capture()`` block."""
        if self.capture is not None:
            refuse_while_capturing("synchronising the capture's stream")
        if self.core is not None:
            self.core.sync()
        self.done = self.seq
        for event, _ in self._held:
            _events.give_back(event)
        self._held.clear()
        self._batch = []
        checks, self._deferred = self._deferred, []
        for check in checks:
            check()

    def __cuda_stream__(self):
        return (0, self.handle)

    def __repr__(self) -> str:
        return f"<fearless Stream {self.handle:#x}>"


class Event:
    """A point in a stream's work: ``Event(stream)`` records it now (default: the current
    stream). ``query()``: whether the work before it has finished; ``synchronize()``: wait for
    it. Pass it to ``Stream.wait`` to order another stream after it."""

    def __init__(self, stream: Stream | None = None):
        refuse_while_capturing("fl.Event()")
        self.stream = stream if stream is not None else current_stream()
        self.handle = _events.record(self.stream.handle) if self.stream.handle or \
            self.stream.core is not None else None
        # the writes this point is after: its stream's so far, and what that stream waited for
        self.knows = dict(self.stream.seen)
        self.knows[self.stream] = self.stream.seq

    def query(self) -> bool:
        return self.handle is None or _events.done(self.handle)

    def synchronize(self) -> None:
        if self.handle is not None:
            _events.synchronize(self.handle)

    def __del__(self):
        if getattr(self, "handle", None) is not None:
            with contextlib.suppress(Exception):
                _events.give_back(self.handle)


class _Events:
    """A pool of CUDA events without timing (recording one is cheap, CUDA Driver API
    ``CU_EVENT_DISABLE_TIMING``)."""

    def __init__(self):
        self.free: list = []

    def record(self, stream: int):
        from cuda.bindings import driver
        if self.free:
            event = self.free.pop()
        else:
            err, event = driver.cuEventCreate(driver.CUevent_flags.CU_EVENT_DISABLE_TIMING)
            _check(err, "cuEventCreate")
        (err,) = driver.cuEventRecord(event, stream)
        _check(err, "cuEventRecord")
        return event

    def done(self, event) -> bool:
        from cuda.bindings import driver
        (err,) = driver.cuEventQuery(event)
        return err == driver.CUresult.CUDA_SUCCESS

    def synchronize(self, event) -> None:
        from cuda.bindings import driver
        (err,) = driver.cuEventSynchronize(event)
        _check(err, "cuEventSynchronize")

    def wait(self, stream: int, event) -> None:
        from cuda.bindings import driver
        (err,) = driver.cuStreamWaitEvent(stream, event, 0)
        _check(err, "cuStreamWaitEvent")

    def give_back(self, event) -> None:
        self.free.append(event)


def _check(err, call: str) -> None:
    from cuda.bindings import driver
    if err != driver.CUresult.CUDA_SUCCESS:
        from fearless.errors import BackendError
        raise BackendError(f"{call} failed: {err}", help="run `fearless doctor`")


_events = _Events()
_all: weakref.WeakSet = weakref.WeakSet()  # every live Stream, for fl.synchronize() and exit
_retired = [0]                     # the writes (seq) of streams that were garbage-collected
_default: dict[str, Stream] = {}
_wrapped: dict[int, Stream] = {}   # foreign CUstream handle -> its fearless Stream
_local = threading.local()         # .chosen: the stack of `with fl.stream(s):` blocks


@atexit.register
def _report_at_exit() -> None:
    """An error a kernel recorded (an out-of-bounds read) surfaces at the next synchronisation;
    a program that ends without one would never hear of it, so say it on stderr at exit, and
    end the process with status 1 (the program's results are not to be trusted).

    An atexit hook cannot change the exit status except by ending the process itself, so it
    calls ``os._exit(1)`` after flushing stdout and stderr: exit hooks registered before
    fearless was imported and the interpreter's final cleanup do not run then. A program that
    already ended with an uncaught exception keeps its status and its cleanup.
    """
    failed = False
    for stream in known_streams():
        if not stream._deferred:
            continue
        try:
            stream.synchronize()
        except Exception as exc:  # noqa: BLE001 - reported, the process is ending anyway
            failed = True
            print(f"fearless: at exit, an error from a kernel that was never synchronised:\n"
                  f"{type(exc).__name__}: {exc}", file=sys.stderr)
    if failed and getattr(sys, "last_value", None) is None:
        for f in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                f.flush()
        os._exit(1)


def check_order(stream: Stream, kernel: str, names, tensors, written) -> None:
    """Refuse (StreamOrderError) a launch on ``stream`` that uses a fearless tensor last written
    on another stream with no ordering between them; then record this launch's writes.
    ``tensors[i]``: a fearless Tensor or None (scalars, foreign memory); ``written[i]``: the
    parameter is written. The cpu backend runs launches as they come: nothing to order; a
    graph capture's stream records kernels that run later, at replays (not tracked)."""
    if not stream._leases:
        return
    for name, t, writes in zip(names, tensors, written):
        if t is None:
            continue
        w = t._storage.writer
        if w is not None and w[0] is not stream:
            other, seq = w
            if other.done < seq and stream.seen.get(other, -1) < seq:
                raise StreamOrderError(
                    f"'{name}' was written by a launch on {other!r} that nothing orders before "
                    f"this launch on {stream!r}", kernel=kernel, param=name,
                    help="order the streams: s.wait(fl.Event(other)) (or s.wait(other)), or "
                         "synchronise the other stream first")
    if any(w and t is not None for t, w in zip(tensors, written)):
        stream.seq += 1
        for t, writes in zip(tensors, written):
            if writes and t is not None:
                t._storage.writer = (stream, stream.seq)


def follow(stream: Stream, theirs: int) -> None:
    """Order ``stream``'s later work after all work enqueued so far on the foreign CUstream
    ``theirs`` (another library's current stream; 0 is the legacy default stream, which
    fearless names ``LEGACY``): what a DLPack export to ``stream`` does for its producer's
    pending work, for arrays a launch reads through their attributes instead (torch, CuPy:
    ``runtime/args.py``). Nothing when they are one stream, or for a graph capture's stream (a
    graph's work is ordered where it is replayed). One event record and one wait otherwise."""
    ours = stream.handle
    if theirs == ours or (theirs or LEGACY) == ours or stream.capture is not None \
            or stream.core is None:
        return
    event = _events.record(theirs)
    _events.wait(ours, event)
    _events.give_back(event)  # the wait took the recorded point: the event may be recorded again


def capturing() -> bool:
    """True inside an ``fl.capture()`` block (of this thread)."""
    chosen = getattr(_local, "chosen", None)
    return bool(chosen) and chosen[-1].capture is not None


def refuse_while_capturing(what: str) -> None:
    """Raise LaunchError when ``what`` (something that waits for the device or reads results)
    is attempted inside an ``fl.capture()`` block."""
    if capturing():
        raise LaunchError(f"{what} inside fl.capture() is refused: the captured work has not "
                          "run (it runs at each replay of the graph), so there is nothing to "
                          "wait for or read yet",
                          help="end the block first; then g.replay() and read the results "
                               "(numpy() waits for the replay)")


def writes_recorded() -> int:
    """Writes recorded on every stream so far (the sum of their ``seq``): unchanged means no
    launch anywhere recorded a write since (graph.py's replay skips its order checks then)."""
    total = _retired[0]
    for ref in _all.data:  # the set under the WeakSet: no iteration guard, ~3x cheaper
        s = ref()
        if s is not None:
            total += s.seq
    return total


def known_streams() -> list[Stream]:
    """Every live stream: the default ones, the wrapped foreign ones and those users made."""
    return list(_all)


def default_stream(backend: str) -> Stream:
    """The backend's default stream (cuda: the legacy default stream, ordered with PyTorch's
    and CuPy's default streams without extra events)."""
    stream = _default.get(backend)
    if stream is None:
        core = device.cuda_device().default_stream if backend == "cuda" else None
        stream = _default[backend] = Stream(core, _wrap=True)
    return stream


def current_stream() -> Stream:
    """The stream launches, copies and operations go to now (see the module docstring)."""
    chosen = getattr(_local, "chosen", None)
    if chosen:
        return chosen[-1]
    return unchosen_stream()


def unchosen_stream() -> Stream:
    """The current stream outside any ``with fl.stream(s):`` block: torch's current stream when
    torch has initialised CUDA, else the backend's default stream."""
    backend = device._chosen or device.current_backend()
    if backend == "cuda":
        torch = sys.modules.get("torch")
        if torch is not None and getattr(torch.cuda, "_initialized", False):
            handle = torch._C._cuda_getCurrentRawStream(0)
            if handle:
                return _wrapped.get(handle) or wrap(handle)
    return _default.get(backend) or default_stream(backend)


def wrap(handle: int) -> Stream:
    """The fearless Stream over another library's CUstream ``handle`` (one per handle).
    Raises LaunchError for a stream of another context (another GPU, or a context that is not
    the device's primary one, which fearless and PyTorch share)."""
    stream = _wrapped.get(handle)
    if stream is None:
        from cuda.bindings import driver
        from cuda.core import Stream as CoreStream
        device.cuda_device()
        err, ctx = driver.cuStreamGetCtx(handle)
        err2, ours = driver.cuCtxGetCurrent()
        if err == driver.CUresult.CUDA_SUCCESS and err2 == driver.CUresult.CUDA_SUCCESS and \
                int(ctx) != int(ours):
            raise LaunchError(f"stream {handle:#x} belongs to another CUDA context (another GPU, "
                              f"or a context that is not GPU 0's primary one) than fearless's",
                              help="create the stream on GPU 0 in its primary context, as "
                                   "torch.cuda.Stream() and fl.Stream() do")
        _check(err, "cuStreamGetCtx")
        stream = _wrapped[handle] = Stream(CoreStream.from_handle(handle), _wrap=True)
    return stream


def as_stream(obj) -> Stream:
    """``obj`` as a fearless Stream: a Stream, or a foreign stream (``torch.cuda.Stream``,
    CuPy, anything with ``__cuda_stream__``). Raises LaunchError for another object or on the
    cpu backend for a foreign stream."""
    if isinstance(obj, Stream):
        return obj
    proto = getattr(obj, "__cuda_stream__", None)
    if proto is not None:
        handle = int(proto()[1])
    elif hasattr(obj, "cuda_stream"):  # torch.cuda.Stream (older torch), cupy.cuda.Stream.ptr
        handle = int(obj.cuda_stream)
    elif hasattr(obj, "ptr") and type(obj).__module__.startswith("cupy"):
        handle = int(obj.ptr)
    else:
        raise LaunchError(f"fl.stream() takes a fearless Stream or a CUDA stream object "
                          f"(torch, CuPy, __cuda_stream__), got {type(obj).__name__}")
    if device.current_backend() != "cuda":
        raise LaunchError("a CUDA stream was given, but the cpu backend is current")
    return default_stream("cuda") if handle == 0 else wrap(handle)


@contextlib.contextmanager
def stream(s):
    """``with fl.stream(s):`` enqueue the body's launches, copies and operations on ``s``
    (see ``as_stream``). Nested blocks stack; the block ends at its ``with``'s end."""
    if capturing():
        raise LaunchError("fl.stream() inside fl.capture() is refused: the block's work goes to "
                          "the capture's stream, and work sent elsewhere would run now, outside "
                          "the graph", help="capture the work of each stream separately")
    chosen = as_stream(s)
    stack = getattr(_local, "chosen", None)
    if stack is None:
        stack = _local.chosen = []
    stack.append(chosen)
    try:
        yield chosen
    finally:
        stack.pop()


@user_facing
def synchronize() -> None:
    """Wait for the device and raise any deferred kernel error (``KernelBoundsError``) of any
    stream fearless used.

    Raises LaunchError inside a running DeviceOperation (a ``.then()`` callback) or an
    ``fl.capture()`` block."""
    ownership.refuse_while_executing("fl.synchronize()")
    refuse_while_capturing("fl.synchronize()")
    streams = known_streams()
    current = current_stream()
    if current not in streams:
        streams.append(current)
    first = None
    for s in streams:
        try:
            s.synchronize()
        except Exception as exc:  # every stream is synchronised; the first error is raised
            first = first or exc
    if first is not None:
        raise first
