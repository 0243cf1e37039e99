"""CUDA graphs: capture a DeviceOperation's work once, replay it with one launch.

``fl.graph(op)`` moves a pending operation in and captures everything it would enqueue (its
kernels, the operations its ``.then()`` callbacks return; callbacks run once, here), without
running it. ``graph.launch()`` returns a DeviceOperation that replays the work;
``graph.sync()`` is ``graph.launch().sync()``; ``graph.replay()`` enqueues one replay and returns
at once, as an eager kernel launch does (a decode loop's step: one host call, ~0.1 us per
captured kernel on the driver's side).

Pointers and shapes are baked into the graph, so the graph holds what the operation held, for
its whole life: Partitions stay moved into it (MovedError on use) and every tensor it touches is
pinned (it stays alive and cannot be partitioned). Between replays the tensors are free: write
new inputs in place, read outputs. While a replay is pending it claims them like any operation
(inputs shared, written tensors exclusive). ``graph.release()`` (or ``close()``) ends the graph
and returns the captured operation's result, the Partitions usable again.

cuda backend: the work is captured by stream capture on a fresh stream (cuda.core's
``GraphBuilder``: ``begin_building`` / ``end_building`` / ``complete``, which wrap
``cuStreamBeginCapture`` / ``cuStreamEndCapture`` / ``cuGraphInstantiate``) and replayed with
``Graph.launch(stream)`` (``cuGraphLaunch``). The capture stream's bounds-error slots are
allocated before the capture; each replay reads the same slots back at its sync, so a
``KernelBoundsError`` surfaces per replay. A graph holds at most 4096 bounds-checked launches.
cpu backend: the enqueue functions are recorded and called again, in order, at each replay.

``fl.capture()`` (``capture.py``) makes a Graph from a block of eager launches instead of an
operation; it has no result and holds no Partition. ``replay()`` checks ownership and stream
order in time independent of the graph's size in the decode loop's case (see ``_order``).
"""
from __future__ import annotations

import contextlib
import weakref

from fearless.errors import LaunchError, MovedError
from fearless.runtime import dispatch, ownership
from fearless.runtime.device import cuda_device, current_backend
from fearless.runtime.lazy import DeviceOperation, _Execution, unique_tensors
from fearless.observe import STATS
from fearless.tracebacks import user_facing
from fearless.runtime.stream import Stream, check_order, current_stream, refuse_while_capturing, \
    writes_recorded
from fearless.runtime.stream import stream as stream_block


class Graph:
    """Captured work, replayable with ``launch()`` or ``replay()``. Make one with
    ``fl.graph(op)`` or ``with fl.capture() as g:``.

    Attributes: ``replays`` (replays launched so far), ``backend``.
    """

    label = "a Graph (fl.graph)"
    give_back_hint = "graph.release() gives it back"

    def __init__(self, op: DeviceOperation):
        if not isinstance(op, DeviceOperation):
            raise TypeError(f"fl.graph() takes a DeviceOperation, got {type(op).__name__}")
        ownership.refuse_while_executing("fl.graph()")
        refuse_while_capturing("fl.graph()")
        op._consume("fl.graph()")
        self._start()
        with ownership.execution():
            ex = self._capture(op)
        self._take_over(op, ex)

    def _start(self) -> None:
        self.backend = current_backend()
        self.replays = 0
        self._released = False
        self._capturing = False  # an fl.capture() block is still recording it (capture.py)
        self._failed = False     # that block raised: the graph never existed
        self._pending: weakref.WeakSet = weakref.WeakSet()
        self._eager: weakref.WeakSet = weakref.WeakSet()  # streams replay() enqueued on
        self._replay = None      # enqueue(stream) of one replay
        self._result, self._partitions, self._pins, self._keep = None, [], [], ()
        self._last = None        # the stream of the last eager replay (in self._eager)
        self._ordered = None     # (stream, writes on others, stream.seq) after the last _order
        self._writer = None      # the shared writer record of the written storages (_order)

    def __repr__(self) -> str:
        state = ("being captured" if self._capturing else "failed" if self._failed else
                 "released" if self._released else f"{self.replays} replays")
        return f"<Graph {self.backend}, {state}>"

    # -- capture -----------------------------------------------------------------------------
    def _capture(self, op: DeviceOperation) -> _Execution:
        """Run ``op``'s tree in capture mode; on failure give everything back and re-raise."""
        if self.backend == "cpu":
            recorded: list = []
            ex = _Execution(current_stream(), recorded)
            try:
                self._result = op._execute(ex)
            except BaseException:
                op._state = "failed"
                ex.release_all(op)
                raise
            self._replay = lambda stream: [enqueue(stream) for enqueue in recorded]
            return ex
        return self._capture_cuda(op)

    def _capture_cuda(self, op: DeviceOperation) -> _Execution:
        builder, stream = begin_cuda()
        ex = _Execution(stream)
        try:
            try:
                self._result = op._execute(ex)
            finally:
                builder.end_building()
            executable = builder.complete()
        except BaseException:
            op._state = "failed"
            ex.release_all(op)
            abandon_cuda(builder, stream)
            raise
        self._adopt_cuda(builder, stream, executable)
        return ex

    def _adopt_cuda(self, builder, stream: Stream, executable) -> None:
        """Replay ``executable`` (the completed capture on ``stream``), reporting the bounds
        errors of the captured launches at each replay's sync."""
        words = dispatch.error_words(stream)
        owners, words.owners = list(words.owners), []
        checks, stream._deferred = [c for c in stream._deferred if c != words.check], []

        def check_words():
            if owners:
                words.owners = list(owners)
                try:
                    words.check()
                finally:
                    stream.core.sync()  # the slots are zeroed again before the next replay

        def replay(on: Stream):
            executable.launch(on.core)
            on.defer(check_words)
            for check in checks:
                on.defer(check)

        # the builder owns the capture stream, which replays read the error slots on: keep both
        self._builder, self._stream, self._executable = builder, stream, executable
        self._replay = replay
        weakref.finalize(self, dispatch.forget_stream, stream)

    def _take_over(self, op: DeviceOperation, ex: _Execution) -> None:
        """The operations that ran give their claims back; the graph takes them for life."""
        leaves = ex.ran
        parts = list({id(p): p for leaf in leaves for p in leaf._partitions}.values())
        reads = unique_tensors(t for leaf in leaves for t in leaf._reads)
        writes = unique_tensors(t for leaf in leaves for t in leaf._writes)
        ex.release_all(op)
        op._state = "done"
        # a partition unpartitioned by a .then() callback is still written at each replay
        writes = unique_tensors(writes + [_alias(p._tensor) for p in parts if p._ended])
        self._partitions = [p for p in parts if not p._ended]
        for p in self._partitions:
            p._hold(self)
        self._pin(reads, writes, [p._tensor for p in self._partitions])

    def _pin(self, reads: list, writes: list, more=()) -> None:
        """Keep pointers to these tensors' memory for the graph's life (``ownership.PIN``)."""
        self._reads, self._writes = reads, writes
        self._names = [f"the graph's input {k} ({t!r})" for k, t in enumerate(reads)] + \
            [f"the graph's output {k} ({t!r})" for k, t in enumerate(writes)]
        self._pins = [ownership.claim(t._storage, *t.byte_extent(), ownership.PIN, self)
                      for t in (*reads, *writes, *more)]
        # for replay(): each storage once (the stream order is tracked per storage)
        self._stores = tuple({id(t._storage): t._storage for t in (*reads, *writes)}.values())
        self._written = tuple({id(t._storage): t._storage for t in writes}.values())

    # -- replay ------------------------------------------------------------------------------
    def _check_live(self, action: str) -> None:
        if self._capturing:
            raise LaunchError(f"cannot {action}: this Graph is still being captured by its "
                              "fl.capture() block", help="use it after the with block")
        if self._failed:
            raise MovedError(f"cannot {action}: the fl.capture() block of this Graph raised, "
                             "so the graph was never made", help="capture it again")
        if self._released:
            raise MovedError(f"cannot {action}: this Graph was released; its arguments were "
                             "given back", help="capture a new graph with fl.graph(op)")

    @user_facing
    def launch(self) -> DeviceOperation:
        """A DeviceOperation replaying the captured work; its ``.sync()`` returns None. While
        pending it claims the graph's tensors (AliasError when they are in use); when it runs,
        the stream-order rules apply as for ``replay()``. Raises
        MovedError after ``release()``, LaunchError inside an ``fl.capture()`` block."""
        refuse_while_capturing("Graph.launch()")
        self._check_live("launch it")
        replay = self._replay

        def enqueue(stream: Stream):
            self._check_live("replay it")
            if stream._leases:
                self._order(stream)
            if STATS.on:
                STATS.replay()
                with STATS.quiet():
                    replay(stream)
            else:
                replay(stream)
            self.replays += 1
            self._eager.add(stream)  # an .enqueue()d replay: release() waits for it

        op = DeviceOperation(enqueue, None, reads=self._reads, writes=self._writes,
                             label="a replay of a Graph")
        self._pending.add(op)
        return op

    @user_facing
    def sync(self) -> None:
        """Replay once on the current stream and wait (``launch().sync()``)."""
        self.launch().sync()

    @user_facing
    def replay(self) -> None:
        """Enqueue one replay on the current stream and return at once, as an eager kernel
        launch does: ordered with the stream's other work; the graph's written tensors count as
        written on that stream (a launch on another stream that uses them unordered is a
        StreamOrderError, and so is this replay when its tensors were written unordered
        elsewhere); a KernelBoundsError surfaces at the stream's next synchronisation. Read the
        outputs after it (``numpy()`` waits) or order other work after it. Raises MovedError
        after ``release()``, AliasError while a pending operation holds the graph's memory,
        LaunchError inside a running operation."""
        if getattr(ownership._local, "executing", False):
            ownership.refuse_while_executing("an eager graph replay")
        refuse_while_capturing("a graph replay")
        if self._replay is None:
            self._check_live("replay it")
        stream = current_stream()
        reads, writes = self._reads, self._writes
        # a pinned tensor cannot be partitioned, so never moved: only claims can refuse it,
        # and there are none while no pending operation holds memory anywhere
        if ownership.any_held():
            for t in reads:
                t._check_use(ownership.READ, "read it", kernel=self.label)
            for t in writes:
                t._check_use(ownership.WRITE, "write it", kernel=self.label)
        if stream._leases:
            self._order(stream)
        if STATS.on:  # a cpu graph replays its recorded launches: counted as one replay
            STATS.replay()
            with STATS.quiet():
                self._replay(stream)
        else:
            self._replay(stream)
        self.replays += 1
        if stream is not self._last:
            self._eager.add(stream)
            self._last = stream
        stream.lease(self)

    def _order(self, stream: Stream) -> None:
        """``check_order`` for a replay on ``stream``, then its writes recorded, in time
        independent of the graph's size in a decode loop. The written storages share one
        mutable writer record, ``[stream, seq]``. Since this graph's last replay on ``stream``:
        when no launch anywhere recorded a write, every check passed then still passes and
        moving that record on is all there is to do (O(1)); when only launches on ``stream``
        did, the checks still pass (those writes are ordered here) and only the written
        storages are pointed at the record again; otherwise each storage is checked
        (``check_order`` when one was last written on another stream)."""
        others = writes_recorded() - stream.seq  # writes recorded on the other streams
        last = self._ordered
        if last is None or last[0] is not stream or last[1] != others:
            for st in self._stores:
                w = st.writer
                if w is not None and w[0] is not stream:
                    reads, writes = self._reads, self._writes
                    check_order(stream, self.label, self._names, reads + writes,
                                [False] * len(reads) + [True] * len(writes))
                    break
        if self._written:
            stream.seq += 1
            if last is not None and last[0] is stream and last[1] == others and \
                    last[2] == stream.seq - 1:
                self._writer[1] = stream.seq  # nothing wrote anything since: O(1)
            else:
                self._writer = [stream, stream.seq]
                for st in self._written:
                    st.writer = self._writer
        self._ordered = (stream, others, stream.seq)

    @user_facing
    def release(self):
        """End the graph and return the captured operation's result (what its ``.sync()`` would
        have returned; None for an ``fl.capture()`` graph), its Partitions usable again.
        Raises LaunchError while a replay is pending, MovedError when already released."""
        self._check_live("release it")
        if any(op._state == "pending" for op in self._pending):
            raise LaunchError("cannot release a Graph while a replay is pending",
                              help="sync or cancel the replay first")
        self._last = self._ordered = None
        for stream in list(self._eager):  # eager replays finish (and report) first
            self._eager.discard(stream)
            stream.synchronize()
        self._released = True
        for c in self._pins:
            ownership.drop(c)
        for p in self._partitions:
            p._give_back(self)
        if self.backend == "cuda":
            self._executable.close()
            dispatch.forget_stream(self._stream)  # frees the error slots on the capture stream
            self._builder.close()                 # then the capture stream itself
        self._replay = self._executable = None
        self._reads, self._writes, self._partitions, self._pins = [], [], [], []
        self._keep = ()
        result, self._result = self._result, None
        return result

    close = release


def begin_cuda() -> tuple:
    """A graph builder and its stream, capturing (``cuStreamBeginCapture``, relaxed mode: other
    streams may allocate and copy meanwhile). The stream's bounds-error slots are allocated and
    zeroed first: an allocation inside the capture would become a node of the graph."""
    builder = cuda_device().create_graph_builder()
    stream = Stream(builder.stream, _wrap=True, _leases=False)
    dispatch.error_words(stream)
    stream.core.sync()
    builder.begin_building("relaxed")
    return builder, stream


@contextlib.contextmanager
def foreign_capture(handle: int, words: int, slots: int, owner):
    """``with foreign_capture(...) as s:`` launches on ``s``, a fearless Stream over the CUstream
    ``handle`` while another library captures it into a CUDA graph of its own (a
    ``torch.cuda.CUDAGraph``). Nothing fearless would allocate, record or wait for inside the
    capture: the launches' bounds-error slots are the ``slots`` zeroed slots at device address
    ``words`` (``owner`` allocated them in the capture, so the graph keeps them and zeroes them
    at each replay), the arguments are not leased (the graph's owner keeps its memory), and the
    slots are never read back: a read out of bounds during a replay is skipped (it gives 0) but
    not reported. Launches must find their kernels loaded (run them once before the capture).
    """
    from cuda.core import Stream as CoreStream

    s = Stream(CoreStream.from_handle(handle), _wrap=True, _leases=False)
    dispatch.borrow_error_words(s, words, slots, owner)
    try:
        with stream_block(s):
            yield s
    finally:
        s._deferred = []  # the slots' checks: nothing reads a foreign graph's slots back
        dispatch.forget_stream(s)


def abandon_cuda(builder, stream: Stream) -> None:
    """Free what ``begin_cuda`` made, after a capture that failed (capture already ended)."""
    stream._deferred = []  # the error slots of launches that will never run
    dispatch.forget_stream(stream)
    builder.close()


def _alias(t):
    """A live handle over a hidden tensor's memory (whose own handle is spent)."""
    return t._view(t.shape, t.strides, t.offset)


@user_facing
def graph(op: DeviceOperation) -> Graph:
    """Capture the pending operation ``op`` into a Graph (see the module docstring). ``op`` is
    moved in; MovedError when it is not pending, LaunchError inside a running operation, and
    whatever the capture raises (the arguments are then given back)."""
    return Graph(op)
