"""What every fearless.nn function shares: input conversion, argument checks, output allocation
in the kind of the first tensor argument (torch in, torch out), and the one launch point of tile
operations, ``run``.

Errors name the nn function as the kernel and the argument as the parameter (``kernel
'rms_norm', parameter 'w': ...``): a dtype or rank that does not fit is an ArgumentTypeError (a
TypeError), a shape that does not fit another argument's a ContractError.
"""
from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Sequence

import numpy as np

from fearless import dtypes
from fearless.errors import ArgumentTypeError, ContractError
from fearless.runtime.lazy import DeviceOperation
from fearless.runtime import device
from fearless.runtime.tensor import Tensor, _alloc, as_tensor, asarray, empty, full

FLOATS = (dtypes.f16, dtypes.bf16, dtypes.f32)   # the activation and weight dtypes of fearless.nn
INDEX = (dtypes.i32, dtypes.i64)
TEST_GPU_SMS = 132   # the H200's SMs: the cpu backend plans grids as for it, so CI runs its plans

_TORCH_NAMES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64",
                "i32": "int32", "i64": "int64", "u8": "uint8", "bool": "bool"}

# Tests set this (``poisoned_outputs``) so that an element no kernel writes shows as NaN (floats)
# or as the integer given; None: outputs are uninitialised.
_poison: float | None = None


# The nn functions are user-facing boundaries (tracebacks.user_facing) themselves: the runtime
# entry points they go through run undecorated, one boundary per call instead of nested ones.
_enqueue = DeviceOperation.enqueue.__wrapped__
_partition = Tensor.partition.__wrapped__


def run(op):
    """Launch a tile operation and return its result tuple: the single launch point of
    fearless.nn. Eager, as a torch op is: enqueued on the current stream without waiting (so a
    model's launches queue up ahead of the GPU, and ``fl.capture()`` records them)."""
    return _enqueue(op)


def partition(t: Tensor, tile: tuple[int, ...]):
    """``t.partition(tile)`` inside an nn function (same checks, no nested boundary)."""
    return _partition(t, tile)


# -- inputs --------------------------------------------------------------------------------------
def is_torch(obj) -> bool:
    """Whether ``obj`` is a torch tensor (without importing torch)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def tensor(fn: str, name: str, obj) -> Tensor:
    """``obj`` (a fearless Tensor, a torch/CuPy/DLPack array, a NumPy array) as a fearless
    Tensor on the current backend, without a copy where it lives there already.

    Raises ArgumentTypeError naming ``fn`` and ``name`` when it cannot be one.
    """
    if isinstance(obj, Tensor):
        return obj
    try:
        t = as_tensor(obj)
        return t if t is not None else asarray(obj)
    except TypeError as exc:
        raise ArgumentTypeError(f"cannot use this {type(obj).__name__} as a tensor: {exc}",
                                kernel=fn, param=name) from None


def check_rank(fn: str, name: str, t: Tensor, ndim: int, layout: str) -> None:
    """ArgumentTypeError unless ``t`` has rank ``ndim``; ``layout`` names the axes, e.g.
    ``"(T, H)"``."""
    if t.ndim != ndim:
        raise ArgumentTypeError(f"expected a rank-{ndim} tensor {layout}, got shape {t.shape}",
                                kernel=fn, param=name)


def check_dtype(fn: str, name: str, t: Tensor, allowed: Sequence[dtypes.DType]) -> None:
    """ArgumentTypeError unless ``t.dtype`` is one of ``allowed``."""
    if t.dtype not in allowed:
        names = ", ".join(d.name for d in allowed)
        raise ArgumentTypeError(f"dtype {t.dtype.name} is not supported (expected one of "
                                f"{names})", kernel=fn, param=name)


def check_same_dtype(fn: str, name: str, t: Tensor, ref_name: str, ref: Tensor) -> None:
    """ArgumentTypeError unless ``t`` has the dtype of ``ref`` (argument ``ref_name``)."""
    if t.dtype is not ref.dtype:
        raise ArgumentTypeError(f"dtype {t.dtype.name} differs from {ref_name}'s "
                                f"{ref.dtype.name}", kernel=fn, param=name,
                                help=f"convert one of them so that both are {ref.dtype.name}")


def check_shape(fn: str, name: str, t: Tensor, shape: Sequence[int | None], why: str) -> None:
    """ContractError unless ``t.shape`` matches ``shape`` (None: any extent); ``why`` says
    where the expected extents come from (``"x's (T, H)"``)."""
    if len(t.shape) != len(shape) or any(e is not None and e != n
                                         for e, n in zip(shape, t.shape)):
        want = "(" + ", ".join("?" if e is None else str(e) for e in shape) + \
            (",)" if len(shape) == 1 else ")")
        raise ContractError(f"shape {t.shape} does not fit {why}: expected {want}",
                            kernel=fn, param=name)


def check_contiguous(fn: str, name: str, t: Tensor) -> None:
    """ArgumentTypeError unless ``t`` is C-contiguous (needed where a view merges axes)."""
    if not t.is_contiguous():
        raise ArgumentTypeError(f"expected a contiguous tensor, got strides {t.strides}",
                                kernel=fn, param=name, help="pass a contiguous copy")


def planning_sms() -> int:
    """The SM count grids are sized for: the device's on cuda, ``TEST_GPU_SMS`` on the cpu
    backend."""
    return device.multiprocessor_count() if device.current_backend() == "cuda" else TEST_GPU_SMS


def pow2(n: int) -> int:
    """The least power of two >= n (1 for n <= 1): a tile extent covering n."""
    return 1 << max(0, (n - 1).bit_length())


# -- outputs -------------------------------------------------------------------------------------
class Output:
    """A new output tensor of one nn call, of the kind of the call's first tensor argument.

    ``tensor`` is the fearless Tensor over it (partition it for a tile kernel, or pass it to a
    SIMT kernel); ``result(part)`` returns what the caller gets: the torch tensor for a torch
    first argument, else a fearless Tensor (``part.unpartition()`` when a Partition is given).
    """

    __slots__ = ("foreign", "tensor")

    def __init__(self, like, shape: tuple[int, ...], dtype: dtypes.DType):
        self.foreign = None
        poison = _poison_of(dtype)
        if is_torch(like):
            torch = sys.modules["torch"]
            tdt = getattr(torch, _TORCH_NAMES[dtype.name])
            self.foreign = (torch.empty(shape, dtype=tdt, device=like.device) if poison is None
                            else torch.full(shape, poison, dtype=tdt, device=like.device))
            self.tensor = as_tensor(self.foreign)
        elif poison is not None:
            self.tensor = full(shape, poison, dtype)
        elif device._chosen == "cuda":  # empty()'s checks hold: nn functions pass int tuples
            self.tensor = _alloc(shape, dtype)
        else:
            self.tensor = empty(shape, dtype)

    def partition(self, tile: tuple[int, ...]):
        """``tensor.partition(tile)`` (see ``partition``)."""
        return _partition(self.tensor, tile)

    def result(self, part=None):
        """The caller's result; ``part`` is the Partition of ``tensor`` that a tile kernel
        wrote (given back by ``run``), ended here."""
        t = part.unpartition() if part is not None else self.tensor
        return self.foreign if self.foreign is not None else t


def output(like, shape: tuple[int, ...], dtype: dtypes.DType) -> Output:
    """A new output of ``shape`` and ``dtype`` of ``like``'s kind (see Output)."""
    return Output(like, tuple(shape), dtype)


def partition_as(fn: str, items) -> list:
    """Partitions of contiguous tensors seen in other shapes, for a kernel that writes them in
    place: ``items`` is a list of (argument name, tensor, shape, tile shape), or (..., window)
    where ``window`` indexes the reshaped view (a tuple of slices): the partition covers
    that window only, and the rest of the tensor is kept from every other use all the same.

    Each tensor is moved (later uses raise MovedError, as after ``partition``), so its reshaped
    view is the only live handle and can be partitioned: a fearless Tensor the caller passed is
    spent, and the nn function returns a new handle. A wrapped foreign array (torch, NumPy)
    stays usable: fearless does not track other libraries' views. All or nothing: when one
    partition is refused (an AliasError: another live view, a graph's pin), the tensors are
    given back usable and the partitions made so far are ended.
    """
    done: list = []
    try:
        for name, t, shape, tile, *window in items:
            check_contiguous(fn, name, t)
            view = t.reshape(tuple(shape))           # MovedError for a tensor already moved
            if window:
                view = view[window[0]]
            t._moved = f"moved into fearless.nn.{fn} (use the tensor it returned)"
            done.append((t, None))
            done[-1] = (t, partition(view, tile))
    except BaseException:
        for t, part in done:
            if part is not None:
                part.unpartition()
            t._moved = None
        raise
    return [part for _, part in done]


def reshaped_alone(fn: str, name: str, t: Tensor, shape: tuple) -> Tensor:
    """``t`` (contiguous) seen in ``shape``, ``t`` itself moved so that the view is the only
    live handle: what a callee that partitions it (an ``ft.autotune`` kernel) needs."""
    check_contiguous(fn, name, t)
    view = t.reshape(tuple(shape))
    t._moved = f"moved into fearless.nn.{fn} (use the tensor it returned)"
    return view


@contextlib.contextmanager
def moved_into(fn: str, items) -> Iterator[list]:
    """``partition_as(fn, items)`` for a ``with`` block that launches on the partitions: when
    the block raises (a refused argument, a refused launch), the partitions are ended and the
    tensors given back usable, as if the call had never been made."""
    parts = partition_as(fn, items)
    try:
        yield parts
    except BaseException:
        for (_, t, *_), part in zip(items, parts):
            if not part._ended:
                part.unpartition()
            t._moved = None
        raise


def _poison_of(dtype: dtypes.DType):
    if _poison is None or dtype.is_float:
        return _poison
    if _poison != _poison:      # NaN: the most negative integer instead
        return int(np.iinfo(dtype.numpy).min)
    return int(_poison)


@contextlib.contextmanager
def poisoned_outputs(value: float = float("nan")) -> Iterator[None]:
    """Fill every output fearless.nn allocates with ``value`` while the block runs (integer
    outputs get ``int(value)``, or their most negative value for NaN), so that tests see an
    element that no kernel wrote."""
    global _poison
    old, _poison = _poison, value
    try:
        yield
    finally:
        _poison = old

