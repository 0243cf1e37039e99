"""Running a compiled SIMT kernel: the bounds-error word, the bounds proofs' preconditions, the
coarsened grid and execution on the cpu backend (cuda launches: ``runtime/plan.py``).

The error word: every bounds-checked cuda launch gets a 32-byte slot (site, index, extent, axis as
i64) in one zeroed device buffer per stream. After the next synchronisation the used slots are
read back in one copy; the first non-zero site becomes a ``KernelBoundsError`` and the slots are
zeroed again. A full buffer forces that synchronisation early (every 4096 launches at most).
The cpu backend reports the same event directly and defers the error to the same point.
"""
from __future__ import annotations

import numpy as np

from fearless.errors import KernelBoundsError, LaunchError, RaceError
from fearless.runtime import memory, workspace
from fearless.runtime.stream import Stream

SLOTS = 4096
MISALIGNED = 7  # the axis code of a misaligned ldmatrix row or async copy
SLOT_BYTES = 32

OBSERVER = None  # fl.stats while it counts (runtime/stats.py): told of each launch


def bounds_error(kernel: str, sites, site: int, index: int, extent: int, axis: int
                 ) -> KernelBoundsError:
    param, span = sites[site - 1]
    if axis == MISALIGNED:  # ldmatrix rows and async copies move 16-byte-aligned chunks
        return KernelBoundsError(
            f"misaligned access: address offset {index} is not a multiple of {extent} bytes",
            kernel=kernel, param=param, span=span, index=index, length=extent, axis=axis,
            help="ldmatrix rows start at a multiple of 8 elements; async copies of `size` bytes "
                 "start at a multiple of `size` bytes (a sliced view may shift the base); this "
                 "access was skipped")
    where = f" along axis {axis}" if axis else ""
    return KernelBoundsError(
        f"read out of bounds: index {index}{where}, but the length is {extent}",
        kernel=kernel, param=param, span=span, index=index, length=extent, axis=axis,
        help="guard the read (if i < len(x): ...) or launch with a size that fits the inputs; "
             "this read was skipped and gave 0")


class ErrorWords:
    """The error-word slots of one stream and the launches that own them since the last sync."""

    def __init__(self, stream: Stream, borrowed: tuple | None = None):
        self.stream = stream
        if borrowed is None:
            self.slots = SLOTS
            self.buffer = memory.allocate(SLOTS * SLOT_BYTES, stream)
            self.base = int(self.buffer.handle)
            memory.memset(self.base, 0, SLOTS * SLOT_BYTES, stream)
        else:  # (address, slots, owner): zeroed memory another library allocated and keeps
            self.base, self.slots, self.buffer = borrowed
        self.owners: list[tuple[str, tuple]] = []  # (kernel name, bounds sites) per used slot

    def acquire(self, kernel: str, sites, shapes: dict) -> int:
        """The device address of a fresh slot for one launch of ``kernel``; ``shapes`` maps
        array parameter names to the shapes of this launch's arguments (for the message)."""
        if len(self.owners) == self.slots:
            if not self.stream._leases and self.stream.core is not None:
                raise LaunchError(f"a graph holds at most {self.slots} bounds-checked launches",
                                  kernel=kernel, help="capture the work as several graphs")
            self.stream.synchronize()  # runs check(), which frees every slot
        if not self.owners:
            self.stream.defer(self.check)
        self.owners.append((kernel, sites, shapes))
        return self.base + (len(self.owners) - 1) * SLOT_BYTES

    def check(self) -> None:
        used, self.owners = self.owners, []
        if not used:
            return
        words = np.zeros((len(used), 4), np.int64)
        memory.copy_device_to_host(words, self.base, words.nbytes, self.stream)
        hit = np.flatnonzero(words[:, 0])
        if hit.size:
            memory.memset(self.base, 0, words.nbytes, self.stream)
            k = int(hit[0])
            kernel, sites, shapes = used[k]
            code, index = int(words[k, 0]), int(words[k, 1])
            site, axis = code // 8, code % 8
            shape = shapes.get(sites[site - 1][0])  # None for a shared array
            if axis == MISALIGNED:  # the device writes offset * 32 + the alignment it needed
                index, extent = index // 32, index % 32
            else:
                extent = shape[axis] if shape is not None and axis < len(shape) else -1
            raise bounds_error(kernel, sites, site, index, extent, axis)


_words: dict[int, ErrorWords] = {}


def error_words(stream: Stream) -> ErrorWords:
    words = _words.get(id(stream))
    if words is None:
        words = _words[id(stream)] = ErrorWords(stream)
    return words


def borrow_error_words(stream: Stream, address: int, slots: int, owner) -> None:
    """Give ``stream`` ``slots`` error-word slots at ``address``: zeroed device memory of
    ``slots * SLOT_BYTES`` bytes that ``owner`` keeps alive. For a stream capturing a graph that
    another library owns (graph.py's ``foreign_capture``), where an allocation of ours would
    become a node of that graph and be freed with it."""
    _words[id(stream)] = ErrorWords(stream, (address, slots, owner))


def forget_stream(stream: Stream) -> None:
    """Free the error-word slots and the stream-K workspace (``workspace.py``) of a stream
    that will not be used again (a graph's)."""
    _words.pop(id(stream), None)
    workspace.forget(stream)


def preconditions_hold(preconditions, names, tensors, launch) -> bool:
    """Whether a launch's array extents meet a kernel's ``bounds_preconditions`` (see
    passes/inbounds.py): ``(array, axis, other, other axis)``, ``(array, axis, None, c)`` or
    ``(array, axis, "<threads>", grid axis)``."""
    shapes = {n: t.shape for n, t in zip(names, tensors) if t is not None}
    for name, axis, other, bound in preconditions:
        if other is None:
            need = bound
        elif other == "<threads>":
            need = launch.grid[bound] * launch.block[bound] if bound < len(launch.grid) else 1
        else:
            need = shapes[other][bound]
        if shapes[name][axis] < need:
            return False
    return True


def physical_grid(grid: tuple, coarsen: int, axis: int) -> tuple:
    """The grid of a kernel whose threads each run ``coarsen`` logical threads along grid
    ``axis``, the slowest axis of its index space (x for 1-d, y, the rows, for 2-d, z for 3-d):
    that axis needs that many times fewer blocks."""
    if coarsen == 1:
        return grid
    return grid[:axis] + (-(-grid[axis] // coarsen),) + grid[axis + 1:]


def launch_cpu(kernel: str, fn, launch, values, tensors, sites, stream: Stream,
               racecheck: bool, *, interpret):
    """Interpret the kernel now; a bounds error is raised at the next synchronisation, a race
    (with ``racecheck``: the kernel layer passes FEARLESS_RACECHECK's) when the launch ends, a
    barrier error as it happens. ``interpret``: the cpu backend's interpreter, which the kernel
    layer hands over (``backends.cpu.simt.interpret``: the runtime imports no backend)."""
    observer, mark = OBSERVER, None
    if observer is not None:
        observer.launch(kernel)
        mark = observer.start(None)
    args = [t._raw_view() if t is not None else v for v, t in zip(values, tensors)]
    events = []
    race = None
    if 0 not in launch.grid:
        race = interpret(fn, launch.grid, launch.block, args,
                         lambda *event: events.append(event), launch.shared, racecheck)
    if mark is not None:
        observer.stop(kernel, None, mark)
    if race is not None:
        text, span = race
        raise RaceError(text, kernel=kernel, span=span,
                        help="separate the accesses with fl.sync_threads(), give each "
                             "thread its own element, or use an atomic method")
    if events:
        error = bounds_error(kernel, sites, *events[0])

        def raise_it():
            raise error
        stream.defer(raise_it)
