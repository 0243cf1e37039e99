"""The error hierarchy every user-facing failure of fearless belongs to.

    FearlessError
    +-- CompileError            the kernel cannot be compiled (bad syntax, types, unsupported feature)
    |   +-- SafetyError         the kernel could race or write where it must not
    +-- LaunchError             a launch was refused before anything ran on the GPU
    |   +-- ContractError       launch configuration does not fit the kernel or the device
    |   |   +-- PartitionError  a tile shape that does not fit the tensor it partitions
    |   +-- AliasError          a writable argument overlaps another argument, or memory that
    |   |                       another view or a pending operation still uses
    |   +-- MovedError          a tensor, Partition or operation was used after it was moved
    |   |                       (into a Partition, a pending operation or a graph)
    |   +-- StreamOrderError    a tensor written on one stream used on another, unordered
    +-- KernelBoundsError       a read went out of bounds on the device (raised at synchronisation)
    +-- RaceError               threads touched one element without synchronisation (cpu backend)
    |   +-- BarrierError        a barrier was reached by only some threads of a block
    +-- BackendError            the GPU, driver or toolchain is missing or failed
    +-- CheckpointError         a model checkpoint fearless.models cannot load (another
    |                           architecture, a missing or misshapen tensor, a damaged file)
    +-- ModelInputError         input a model refuses before running (a prompt longer than the
    |                           context, a token id past the vocabulary, a full KV cache)
    +-- InternalError           a bug in fearless; keeps its traceback
PerformanceWarning (a UserWarning)  right, but slower than it could be (the message says why)
+-- OccupancyWarning                a launch's tiles do not suit its output's shape
CacheWarning (a UserWarning)    a damaged or unwritable JIT cache entry, recompiled instead

Messages read like a compiler's: ``kernel 'k', parameter 'p': what went wrong``, then the source
location with a caret under the expression, then a ``help:`` line. Argument count, dtype and rank
mismatches at launch are ``ArgumentTypeError``, a subclass of both ``LaunchError`` and the built-in
``TypeError``, so ``except TypeError`` keeps working.
"""
from __future__ import annotations

from fearless.frontend.spans import Span


class FearlessError(Exception):
    """Base of all fearless errors.

    Attributes: ``kernel`` (name or None), ``param`` (parameter name or None), ``span`` (a Span
    into the user's source or None), ``help`` (one line of advice or None), ``reason`` (the bare
    message without location).
    """

    def __init__(self, reason: str, *, kernel: str | None = None, param: str | None = None,
                 span: Span | None = None, help: str | None = None):
        self.reason = reason
        self.kernel = kernel
        self.param = param
        self.span = span
        self.help = help
        super().__init__(self.render())

    def render(self) -> str:
        head = []
        if self.kernel:
            head.append(f"kernel '{self.kernel}'")
        if self.param:
            head.append(f"parameter '{self.param}'")
        text = (", ".join(head) + ": " if head else "") + self.reason
        if self.span is not None:
            text += "\n" + self.span.render()
        if self.help:
            text += f"\nhelp: {self.help}"
        return text

    def with_kernel(self, kernel: str) -> "FearlessError":
        """Return this error with the kernel name filled in (used as errors cross layers)."""
        if self.kernel is None:
            self.kernel = kernel
            self.args = (self.render(),)
        return self


class CompileError(FearlessError):
    """The kernel cannot be compiled: unsupported syntax, a type error, an unknown name."""


class SafetyError(CompileError):
    """The kernel could race or write outside its own element; refused at compile time."""


class LaunchError(FearlessError):
    """A launch was refused before anything touched the GPU."""


class ContractError(LaunchError):
    """The launch configuration does not fit the kernel, its contract or the device limits."""


class AliasError(LaunchError):
    """A writable argument overlaps another argument (or itself, through a broadcast view), or
    memory that another live view or a pending operation still uses."""


class StreamOrderError(LaunchError):
    """A launch on one stream would use a tensor that a launch on another stream writes, with
    nothing ordering the two (no event wait, no synchronisation): the GPU could run them in
    either order."""


class MovedError(LaunchError):
    """A handle was used after its ownership moved elsewhere.

    A tensor moves into a Partition (``t.partition(...)``), a Partition into a pending
    DeviceOperation or a Graph, an operation into a ``.then()`` chain, ``fl.zip`` or
    ``fl.graph``; an operation that ran, a released Graph and an unpartitioned Partition are
    spent. The message names the handle, where it went and how to get ownership back.
    """


class PartitionError(ContractError, ValueError):
    """A tile shape that does not fit the tensor being partitioned (rank, extents); also a
    ``ValueError``, so ``except ValueError`` keeps working."""


class ShapeError(FearlessError, ValueError):
    """A new shape that does not fit a tensor: another number of elements, or a layout its
    strides cannot give without a copy (``Tensor.reshape``); also a ``ValueError``."""


class ArgumentTypeError(LaunchError, TypeError):
    """Wrong argument count, dtype, rank or device for a kernel parameter."""


class KernelBoundsError(FearlessError):
    """A read inside a kernel was out of bounds; recorded on the device, raised at the next sync.

    Attributes besides FearlessError's: ``index`` (the offending index), ``length`` (the extent
    of that axis), ``axis``.
    """

    def __init__(self, reason: str, *, index: int, length: int, axis: int, **kw):
        self.index, self.length, self.axis = index, length, axis
        super().__init__(reason, **kw)


class RaceError(FearlessError):
    """Two threads of one launch touched one element, at least one of them writing, with no
    barrier between them (or from different blocks). Found by the cpu backend's race detector
    (on unless ``FEARLESS_RACECHECK=0``) and raised when the launch ends. The message names both
    source lines and both threads as ``block (x, y), thread (x, y)``."""


class BarrierError(RaceError):
    """A barrier (``sync_threads()``) was reached by only some threads of a block, which would
    deadlock or break shared memory on the GPU; found by the cpu backend as the block runs."""


class BackendError(FearlessError):
    """The GPU, driver or compilation toolchain is missing, too old or failed."""


class CheckpointError(FearlessError, ValueError):
    """A checkpoint directory fearless.models cannot load: its architecture, config, tensor
    names, shapes or dtypes, or a damaged safetensors file. The message names the file and the
    key or tensor."""


class ModelInputError(FearlessError, ValueError):
    """Input a model refuses before anything runs: token ids out of the vocabulary, a prompt
    longer than the context, more new tokens than the KV cache holds."""


class InternalError(FearlessError):
    """A bug in fearless itself. Raised ``from`` the original exception so its traceback stays."""


class AutotuneError(FearlessError, ValueError):
    """An autotuner's config list, key or arguments that cannot be used, or every config of a
    tuning failing (the message lists each with why)."""


class PerformanceWarning(UserWarning):
    """The code runs right but slower than it could (the reason is in the message)."""


class OccupancyWarning(PerformanceWarning):
    """A launch's tiles do not suit its output's shape (SMs or tensor cores idle, or tiles far
    smaller than the shape allows): a PerformanceWarning about one call's shape, not about the
    compiled kernel (``ft.autotune`` does not carry it from one shape's tuning to another's)."""


class CacheWarning(UserWarning):
    """A JIT cache entry was damaged (and is compiled again), the GPU driver refused cached code
    (compiled again), or the cache folder cannot be written. Never a wrong result: filter it with
    ``warnings.filterwarnings("ignore", category=fearless.errors.CacheWarning)``."""


class ToolchainWarning(UserWarning):
    """An installed compiler component is known to miscompile code fearless emits (the message
    names it, the wrong result it gives and the version to install)."""
