"""``fl.capture()``: record a block's eager launches into a Graph, to replay them later.

    with fl.capture() as g:           # the block's launches are recorded, not run
        k[launch](x, pos, tmp)        # eager SIMT launches
        ft_kernel(tmp.partition(256), w).enqueue()   # operations enqueued eagerly
    g.replay()                        # one host call per replay (graph.py)

Inside the block a capturing stream is current. Each eager launch (``kernel[launch](...)``,
``launch_raw``) and each ``op.enqueue()`` goes to it: on cuda by stream capture (graph.py's
``begin_cuda``, cuda.core's GraphBuilder over ``cuStreamBeginCapture``); on the cpu backend the
enqueue closures are recorded and called again, in order, at each replay. Either way nothing
runs at capture. ``g`` is a ``Graph`` (replay(), launch(), sync(), release()), usable once the
block has ended.

Memory: the tensors the captured launches touch are pinned for the graph's life (they stay
alive, cannot be partitioned; the graph's pointers are baked in), as ``fl.graph`` pins them.
Tensors made inside the block (``fl.empty``, ``zeros``, ``asarray``...) get memory outside the
capture, at once: allocated on the stream that was current when the block began (never a
stream-ordered allocation inside the graph, which would change or free its address), and
filled there, once, at capture time (not at each replay). Between replays, write inputs in
place and read outputs as for any graph.

Refused inside the block (LaunchError), since the captured work has not run: host reads
(``numpy()``, ``host_view()``), ``.sync()``, ``fl.synchronize()``, a replay or ``fl.graph`` of
a graph, ``fl.stream()`` (work sent to another stream would run now), ``fl.Event()`` and
``Stream.wait`` (a graph is ordered where it is replayed), a nested ``fl.capture()``. An
exception inside the block ends the capture: the graph is never made (``g`` refuses every use
with MovedError) and nothing stays pinned.

Limits: work that other libraries enqueue inside the block (torch) is neither captured nor
ordered with the graph; a graph holds at most 4096 bounds-checked launches.
"""
from __future__ import annotations

from fearless.errors import LaunchError
from fearless.runtime import ownership
from fearless.runtime import stream as streams
from fearless.runtime.graph import Graph, _alias, abandon_cuda, begin_cuda
from fearless.runtime.lazy import unique_tensors
from fearless.runtime.stream import Stream, current_stream, refuse_while_capturing
from fearless.tracebacks import user_facing


class _Recorder:
    """What a capture collects, reached through its stream's ``capture`` attribute.

    ``origin``: the stream current when the block began (tensors made inside the block are
    allocated there); ``recorded``: the enqueue closures (cpu); ``reads``/``writes``: the
    fearless tensors the captured launches read and write; ``keep``: what they need alive
    (their arguments, their operations)."""

    __slots__ = ("keep", "origin", "reads", "recorded", "writes")

    def __init__(self, origin: Stream):
        self.origin = origin
        self.recorded: list = []
        self.reads: list = []
        self.writes: list = []
        self.keep: list = []

    def add(self, stream: Stream, enqueue, reads, writes, keep) -> None:
        """Capture one launch: ``enqueue(stream)`` puts it on the capturing stream (cuda) or
        is kept to be called at each replay (cpu); ``reads``/``writes``: its fearless tensors;
        ``keep``: what must outlive the graph's replays."""
        self.reads.extend(reads)
        self.writes.extend(writes)
        self.keep.append(keep)
        if stream.core is None:
            self.recorded.append(enqueue)
        else:
            enqueue(stream)


class capture:
    """``with fl.capture() as g:`` records the block's eager launches into the Graph ``g``
    (see the module docstring). Raises LaunchError inside a running operation or another
    capture; the block's own exception ends the capture and propagates."""

    def __init__(self):
        self._graph: Graph | None = None
        self._stream: Stream | None = None
        self._builder = None

    @user_facing
    def __enter__(self) -> Graph:
        ownership.refuse_while_executing("fl.capture()")
        refuse_while_capturing("fl.capture()")
        if self._graph is not None:
            raise LaunchError("an fl.capture() object captures once", help="make a new one")
        graph = Graph.__new__(Graph)
        graph._start()
        graph._capturing = True
        recorder = _Recorder(current_stream())
        if graph.backend == "cuda":
            self._builder, stream = begin_cuda()
        else:
            stream = Stream(None, _wrap=True)
        stream.capture = recorder
        chosen = getattr(streams._local, "chosen", None)
        if chosen is None:
            chosen = streams._local.chosen = []
        chosen.append(stream)
        self._graph, self._stream = graph, stream
        return graph

    def __exit__(self, kind, exc, tb) -> bool:
        graph, stream, builder = self._graph, self._stream, self._builder
        streams._local.chosen.remove(stream)
        recorder, stream.capture = stream.capture, None
        graph._capturing = False
        failure, executable = None, None
        if builder is not None:
            try:
                builder.end_building()  # always: the stream must stop capturing
                if kind is None:
                    executable = builder.complete()
            except Exception as err:  # noqa: BLE001 - the block's own error wins
                failure = err
        if kind is not None or failure is not None:
            graph._failed = True
            if builder is not None:
                abandon_cuda(builder, stream)
            if kind is None:
                raise failure
            return False
        if builder is not None:
            recorder.origin.core.sync()  # memory made in the block is ready on every stream
            graph._adopt_cuda(builder, stream, executable)
        else:
            recorded = recorder.recorded
            graph._replay = lambda on: [enqueue(on) for enqueue in recorded]
        # aliases: a partition's own handle is spent when it is unpartitioned, not its memory
        graph._pin(unique_tensors([_alias(t) for t in recorder.reads]),
                   unique_tensors([_alias(t) for t in recorder.writes]))
        graph._keep = tuple(recorder.keep)
        return False
