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
"""
from __future__ import annotations

import weakref

from fearless.errors import LaunchError, MovedError
from fearless.runtime import dispatch, ownership
from fearless.runtime.device import cuda_device, current_backend
from fearless.runtime.lazy import DeviceOperation, _Execution, unique_tensors
from fearless.tracebacks import user_facing
from fearless.runtime.stream import Stream, check_order, current_stream


class Graph:
    """A captured DeviceOperation, replayable with ``launch()``. Make one with ``fl.graph(op)``.

    Attributes: ``replays`` (replays launched so far), ``backend``.
    """

    label = "a Graph (fl.graph)"
    give_back_hint = "graph.release() gives it back"

    def __init__(self, op: DeviceOperation):
        if not isinstance(op, DeviceOperation):
            raise TypeError(f"fl.graph() takes a DeviceOperation, got {type(op).__name__}")
        ownership.refuse_while_executing("fl.graph()")
        op._consume("fl.graph()")
        self.backend = current_backend()
        self.replays = 0
        self._released = False
        self._pending: weakref.WeakSet = weakref.WeakSet()
        self._eager: weakref.WeakSet = weakref.WeakSet()  # streams replay() enqueued on
        self._replay = None      # enqueue(stream) of one replay
        with ownership.execution():
            ex = self._capture(op)
        self._take_over(op, ex)

    def __repr__(self) -> str:
        state = "released" if self._released else f"{self.replays} replays"
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
        builder = cuda_device().create_graph_builder()
        stream = Stream(builder.stream, _wrap=True, _leases=False)
        words = dispatch.error_words(stream)  # allocated and zeroed before the capture begins
        stream.core.sync()
        ex = _Execution(stream)
        builder.begin_building("relaxed")
        try:
            try:
                self._result = op._execute(ex)
            finally:
                builder.end_building()
            executable = builder.complete()
        except BaseException:
            op._state = "failed"
            ex.release_all(op)
            dispatch.forget_stream(stream)
            builder.close()
            raise
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
        return ex

    def _take_over(self, op: DeviceOperation, ex: _Execution) -> None:
        """The operations that ran give their claims back; the graph takes them for life."""
        leaves = ex.ran
        parts = list({id(p): p for leaf in leaves for p in leaf._partitions}.values())
        self._reads = unique_tensors(t for leaf in leaves for t in leaf._reads)
        self._writes = unique_tensors(t for leaf in leaves for t in leaf._writes)
        ex.release_all(op)
        op._state = "done"
        # a partition unpartitioned by a .then() callback is still written at each replay
        self._writes = unique_tensors(self._writes + [_alias(p._tensor) for p in parts
                                                      if p._ended])
        self._partitions = [p for p in parts if not p._ended]
        self._names = [f"the graph's input {k} ({t!r})" for k, t in enumerate(self._reads)] + \
            [f"the graph's output {k} ({t!r})" for k, t in enumerate(self._writes)]
        self._pins = []
        for p in self._partitions:
            p._hold(self)
        for t in (*self._reads, *self._writes, *(p._tensor for p in self._partitions)):
            self._pins.append(ownership.claim(t._storage, *t.byte_extent(), ownership.PIN, self))

    # -- replay ------------------------------------------------------------------------------
    def _check_live(self, action: str) -> None:
        if self._released:
            raise MovedError(f"cannot {action}: this Graph was released; its arguments were "
                             "given back", help="capture a new graph with fl.graph(op)")

    @user_facing
    def launch(self) -> DeviceOperation:
        """A DeviceOperation replaying the captured work; its ``.sync()`` returns None. While
        pending it claims the graph's tensors (AliasError when they are in use). Raises
        MovedError after ``release()``."""
        self._check_live("launch it")
        replay = self._replay

        def enqueue(stream: Stream):
            self._check_live("replay it")
            replay(stream)
            self.replays += 1

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
        ownership.refuse_while_executing("an eager graph replay")
        self._check_live("replay it")
        stream = current_stream()
        reads, writes = self._reads, self._writes
        for t in reads:
            t._check_use(ownership.READ, "read it", kernel=self.label)
        for t in writes:
            t._check_use(ownership.WRITE, "write it", kernel=self.label)
        check_order(stream, self.label, self._names, reads + writes,
                    [False] * len(reads) + [True] * len(writes))
        self._replay(stream)
        self.replays += 1
        self._eager.add(stream)
        stream.lease(self)

    @user_facing
    def release(self):
        """End the graph and return the captured operation's result (what its ``.sync()`` would
        have returned), its Partitions usable again. Raises LaunchError while a replay is
        pending, MovedError when already released."""
        self._check_live("release it")
        if any(op._state == "pending" for op in self._pending):
            raise LaunchError("cannot release a Graph while a replay is pending",
                              help="sync or cancel the replay first")
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
        result, self._result = self._result, None
        return result

    close = release


def _alias(t):
    """A live handle over a hidden tensor's memory (whose own handle is spent)."""
    return t._view(t.shape, t.strides, t.offset)


@user_facing
def graph(op: DeviceOperation) -> Graph:
    """Capture the pending operation ``op`` into a Graph (see the module docstring). ``op`` is
    moved in; MovedError when it is not pending, LaunchError inside a running operation, and
    whatever the capture raises (the arguments are then given back)."""
    return Graph(op)
