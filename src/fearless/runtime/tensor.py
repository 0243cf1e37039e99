"""Tensors: typed, strided views of host or device memory, and the factories that make them.

A Tensor is metadata (shape, element strides, element offset, dtype, backend) over a buffer plus
a reference to whatever owns that buffer: on cuda a cuda.core Buffer or another library's array
(through its StridedMemoryView); on cpu a flat uint8 NumPy array over the buffer's bytes, which
in turn keeps the NumPy array or foreign producer alive. Indexing and ``.T`` compute new
metadata over the same buffer and never copy; ``numpy()`` always copies out.

The launch layer reads ``data_ptr``, ``byte_extent`` and ``has_internal_overlap`` for argument
packing and alias checks; the CPU kernel interpreter reads and writes ``_raw_view()`` in place.

Ownership (see ``ownership.py``): all views of one buffer share a Storage. ``partition()`` moves
a tensor into a Partition when no other view of its memory is alive; the moved handle refuses
every use but its metadata (MovedError). Memory that a pending operation reads may still be read
here but not written or exported; memory it writes may not be touched at all (AliasError).
"""
from __future__ import annotations

import operator
import sys

import numpy as np

from fearless import dtypes
from fearless.errors import AliasError, ArgumentTypeError, MovedError, ShapeError
from fearless.runtime import interop, memory, ownership, stream
from fearless.runtime.device import current_backend, cuda_device
from fearless.runtime.partition import Partition, Persistent, tile_shape_of
from fearless.tracebacks import user_facing


class Tensor:
    """An n-d array on the backend that was current when it was made (``"cpu"`` or ``"cuda"``).

    Attributes: ``shape`` (tuple of ints), ``strides`` (in elements; 0 for a broadcast axis,
    negative for a reversed one), ``dtype`` (fearless DType), ``backend``, ``offset`` (elements
    from the buffer start to element [0,...,0]). Make tensors with the factories (``asarray``,
    ``empty``, ``zeros``, ``ones``, ``full``, ``as_tensor``), not with this constructor.

    Ownership: ``partition()`` moves the tensor; afterwards only the attributes above stay
    usable, everything else raises MovedError. While a pending DeviceOperation reads the
    memory, ``numpy()`` still works and ``host_view()`` is read-only; while one writes it, any
    access raises AliasError.
    """

    __slots__ = ("shape", "strides", "dtype", "backend", "offset", "readonly", "_base_ptr",
                 "_owner", "_facts", "_storage", "_moved", "_launch_view", "_tile_facts",
                 "__weakref__")

    def __init__(self, *, shape, strides, dtype, backend, offset, base_ptr, owner,
                 readonly=False, storage=None):
        self.shape: tuple[int, ...] = tuple(shape)
        self.strides: tuple[int, ...] = tuple(strides)
        self.dtype: dtypes.DType = dtype
        self.backend: str = backend
        self.offset: int = offset
        self._base_ptr = base_ptr   # address of the buffer start (host or device)
        self._owner = owner         # keeps the memory alive; on cpu the uint8 array of the buffer
        self._facts = None          # (contiguous, byte extent, overlap), computed on first use
        self.readonly: bool = readonly  # memory the producer marked read-only (kernels may not write)
        self._storage = storage if storage is not None else ownership.Storage()
        self._storage.views.add(self)
        self._moved: str | None = None  # where ownership went, once moved
        self._launch_view = None    # runtime/args.py: what launches read, made on first launch
        self._tile_facts = None     # kernel/tile_fast.py: its layout facts, on first tile launch

    # -- sizes -------------------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements (1 for a 0-d tensor)."""
        return _prod(self.shape)

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        """``size * itemsize``: bytes of the elements, not of the extent they span."""
        return self.size * self.itemsize

    # -- layout ------------------------------------------------------------------------------
    def data_ptr(self) -> int:
        """Address of element [0,...,0]: a host address on cpu, a device address on cuda.

        Raises MovedError once the tensor was partitioned."""
        if self._moved is not None:
            self._refuse_moved("take its address")
        return self._base_ptr + self.offset * self.itemsize

    def _layout(self) -> tuple:
        # A tensor's layout never changes, and launches ask for these facts every time: cache.
        if self._facts is None:
            lo, hi = _extent(self.shape, self.strides)
            p = self._base_ptr + self.offset * self.itemsize
            self._facts = (self._contiguous(), (p + lo * self.itemsize, p + hi * self.itemsize),
                           self._overlaps())
        return self._facts

    def byte_extent(self) -> tuple[int, int]:
        """Half-open byte range ``[lo, hi)`` covering every element; ``(p, p)`` when empty.

        Addresses as in ``data_ptr()``; negative strides reach below it, zero strides add nothing.
        """
        return self._layout()[1]

    def has_internal_overlap(self) -> bool:
        """True when two different indices may address the same element.

        Exact for the usual layouts (contiguous, sliced, transposed, broadcast): axes of extent 1
        are ignored, a stride 0 overlaps, and sorted by ``|stride|`` each axis must step over the
        whole span of the faster ones. Interleaved but disjoint layouts also report True.
        """
        return self._layout()[2]

    def is_contiguous(self) -> bool:
        """C-contiguous (strides of size-1 axes ignored; empty tensors count as contiguous)."""
        return self._layout()[0]

    def _overlaps(self) -> bool:
        return self.size != 0 and overlaps(self.shape, self.strides)

    def _contiguous(self) -> bool:
        if self.size == 0:
            return True
        expected = interop.c_strides(self.shape)
        return all(n == 1 or s == e for n, s, e in zip(self.shape, self.strides, expected))

    # -- host access -------------------------------------------------------------------------
    @user_facing
    def numpy(self) -> np.ndarray:
        """A new C-contiguous host array with this shape and dtype (bf16: ml_dtypes.bfloat16).

        Synchronises the current stream first, so a deferred kernel error (KernelBoundsError)
        raises here. Raises BackendError when a cuda copy fails, MovedError for a partitioned
        tensor, AliasError while a pending operation writes this memory, LaunchError inside a
        running operation (a ``.then()`` callback) or an ``fl.capture()`` block.
        """
        self._check_use(ownership.READ, "read it with numpy()")
        ownership.refuse_while_executing("Tensor.numpy(), which synchronises,")
        stream.refuse_while_capturing("Tensor.numpy(), a host read,")
        stream.synchronize()
        if self.backend == "cpu":
            return np.array(self._raw_view(), order="C", copy=True)
        lo, hi = self.byte_extent()
        host = np.empty(hi - lo, np.uint8)
        memory.copy_device_to_host(host, lo, hi - lo)
        view = np.ndarray(self.shape, self.dtype.numpy, buffer=host, offset=self.data_ptr() - lo,
                          strides=self._byte_strides())
        return np.asarray(view, order="C")  # copies only a strided view; host is ours alone

    @user_facing
    def host_view(self) -> np.ndarray:
        """cpu only: a NumPy view sharing this tensor's memory and strides (read-only when the
        wrapped array was, or while a pending operation reads this memory).

        The array counts as a live view of the memory (``partition()`` refuses while it is
        alive). Raises TypeError on a cuda tensor: use ``numpy()`` to copy it out; MovedError
        for a partitioned tensor; AliasError while a pending operation writes this memory;
        LaunchError inside an ``fl.capture()`` block.
        """
        if self.backend != "cpu":
            raise TypeError(f"host_view() needs a cpu tensor, this one lives on {self.backend}; "
                            "use numpy() to copy it to the host")
        self._check_use(ownership.READ, "view it with host_view()")
        stream.refuse_while_capturing("Tensor.host_view(), a host read,")
        view = self._raw_view()
        if ownership.conflict(self._storage, *self.byte_extent(), ownership.WRITE) is not None:
            view.flags.writeable = False  # a pending operation reads it: reading is all we allow
        self._storage.add_host_view(view)
        return view

    def _raw_view(self) -> np.ndarray:
        """The host view without ownership checks, for the CPU interpreter and ``numpy()``."""
        return np.ndarray(self.shape, self.dtype.numpy, buffer=self._owner,
                          offset=self.offset * self.itemsize, strides=self._byte_strides())

    def _byte_strides(self) -> tuple[int, ...]:
        return tuple(s * self.itemsize for s in self.strides)

    # -- views -------------------------------------------------------------------------------
    @user_facing
    def __getitem__(self, key) -> "Tensor":
        """Basic indexing (ints, slices with any nonzero step, one Ellipsis): a view, no copy.

        Raises IndexError (out of range, too many indices, step 0) or TypeError (anything else:
        arrays, lists, booleans, None); MovedError for a partitioned tensor.
        """
        if self._moved is not None:
            self._refuse_moved("index it")
        key = _expand_key(key, self.ndim)
        offset, shape, strides = self.offset, [], []
        for axis, (k, n, s) in enumerate(zip(key, self.shape, self.strides)):
            if isinstance(k, slice):
                if k.step == 0:
                    raise IndexError("slice step cannot be zero")
                start, stop, step = k.indices(n)
                length = len(range(start, stop, step))
                if length:  # an empty axis keeps the offset inside the buffer
                    offset += start * s
                shape.append(length)
                strides.append(s * step)
            else:
                offset += _axis_index(k, axis, n) * s
        return self._view(tuple(shape), tuple(strides), offset)

    @property
    def T(self) -> "Tensor":
        """The view with axes reversed (a matrix transpose for 2-d)."""
        if self._moved is not None:
            self._refuse_moved("transpose it")
        return self._view(self.shape[::-1], self.strides[::-1], self.offset)

    @user_facing
    def reshape(self, *shape) -> "Tensor":
        """A view of the same elements, in C order, with ``shape`` (ints, or one tuple; one
        entry may be -1: the extent that keeps the element count). Never copies: the view
        shares this tensor's memory (and Storage) as a slice does.

        Follows NumPy's rules for a reshape without a copy: each run of axes that merges into
        or splits from new axes must step through memory as one contiguous run (a transposed
        or strided matrix cannot be flattened). Raises ShapeError (a ValueError) when the
        element counts differ, for more than one -1, a negative extent, or a layout that
        needs a copy; MovedError for a partitioned tensor.
        """
        if self._moved is not None:
            self._refuse_moved("reshape it")
        new = _reshape_target(shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list))
                              else shape, self.shape)
        strides = _reshaped_strides(self.shape, self.strides, new)
        if strides is None:
            raise ShapeError(f"cannot reshape {self!r} (strides {self.strides}) to {new} without "
                             "a copy: the axes it merges are not contiguous in memory",
                             help="reshape a contiguous copy (fl.asarray(t.numpy())), or index "
                                  "before transposing")
        return self._view(new, strides, self.offset)

    def _handle(self) -> "Tensor":
        """A new handle with this very layout (a partition's hidden handle, the tensor that
        ``unpartition`` returns): the layout facts computed for this one carry over."""
        t = self._view(self.shape, self.strides, self.offset)
        t._facts, t._tile_facts = self._facts, self._tile_facts
        return t

    def _view(self, shape, strides, offset) -> "Tensor":
        return Tensor(shape=shape, strides=strides, dtype=self.dtype, backend=self.backend,
                      offset=offset, base_ptr=self._base_ptr, owner=self._owner,
                      readonly=self.readonly, storage=self._storage)

    # -- ownership ---------------------------------------------------------------------------
    @user_facing
    def partition(self, tile_shape, schedule: Persistent | None = None) -> Partition:
        """Move this tensor into a Partition with tiles of ``tile_shape`` (an int or a tuple,
        one dimension >= 1 per axis, rank 1 to 3) for exclusive use as a kernel output;
        ``schedule``: None (one tile block per tile), ``fearless.tile.persistent(...)`` (a
        fixed number of tile blocks, each running the kernel for its tiles in turn) or
        ``fearless.tile.stream_k(...)`` (persistent, the reduction loops of the last, partial
        wave's tiles split between blocks).

        This handle is moved: later uses other than ``shape``/``strides``/``dtype`` raise
        MovedError; ``Partition.unpartition()`` returns a fresh tensor. Raises AliasError when
        another view of the memory is alive (a slice, ``.T``, a ``host_view()`` array, a DLPack
        export still held) or a pending operation or graph uses it, or when elements share
        memory (broadcast strides); ArgumentTypeError for read-only memory; MovedError when
        already moved. Limit: for memory fearless did not allocate (a NumPy array or torch
        tensor it wraps), views held by other libraries are unknown and not refused.
        """
        tile = tile_shape_of(tile_shape, self.shape)
        if schedule is not None and not isinstance(schedule, Persistent):
            raise ArgumentTypeError(f"schedule= takes fearless.tile.persistent(...) or "
                                    f"stream_k(...), got "
                                    f"{type(schedule).__name__}")
        if self._moved is not None:
            self._refuse_moved("partition it")
        storage = self._storage
        held = ownership.conflict(storage, 0, 0, "partition")
        if held is not None:
            raise AliasError(f"cannot partition {self!r}: {held.describe()}",
                             help=_give_back_hint(held))
        other = storage.other_view(but=self)
        if other is not None:
            raise AliasError(f"cannot partition {self!r}: another view of its memory is alive "
                             f"({other})", help="a partition needs the only handle to its "
                                                "memory: drop other views (del v), or partition "
                                                "a copy")
        if storage.has_host_views():
            raise AliasError(f"cannot partition {self!r}: a NumPy array from host_view() still "
                             "views its memory", help="drop that array first (del it)")
        if interop.exported(storage):
            raise AliasError(f"cannot partition {self!r}: a DLPack consumer (NumPy, PyTorch, "
                             "...) still holds an export of its memory",
                             help="drop the consumer's array first")
        if self.readonly:
            raise ArgumentTypeError(f"cannot partition {self!r}: its memory is read-only",
                                    help="partition a writable copy")
        if self.size > 1 and self.has_internal_overlap():
            raise AliasError(f"cannot partition {self!r}: several of its elements share memory "
                             f"(strides {self.strides})",
                             help="partition a tensor without broadcast or overlapping strides")
        hidden = self._handle()
        self._moved = f"moved into a Partition by .partition({tile})"
        return Partition(hidden, tile, schedule, origin=self)

    def _refuse_moved(self, action: str, **where):
        raise MovedError(f"cannot {action}: {self!r} was {self._moved}",
                         help="the operation's .sync() gives the Partition back; "
                              "partition.unpartition() then returns a usable tensor (this "
                              "handle stays moved)", **where)

    def _check_use(self, access: str, action: str, owner=None, **where) -> None:
        """Refuse ``access`` (ownership.READ or WRITE) of a moved tensor (MovedError) or of
        memory a pending operation other than ``owner`` holds against it (AliasError).
        ``where``: kernel, param for the message."""
        if self._moved is not None:
            self._refuse_moved(action, **where)
        if self._storage.claims:
            held = ownership.conflict(self._storage, *self.byte_extent(), access, owner)
            if held is not None:
                raise AliasError(f"cannot {action}: {held.describe()}", help=_give_back_hint(held),
                                 **where)

    # -- Python protocols ----------------------------------------------------------------------
    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self) -> str:
        return f"Tensor(shape={self.shape}, dtype={self.dtype}, backend={self.backend})"

    @user_facing
    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        """NumPy's conversion hook: ``numpy()`` (cast to ``dtype`` when given).

        Raises ValueError for ``copy=False``: a Tensor is never a NumPy array without a copy.
        """
        if copy is False:
            raise ValueError("a fearless Tensor cannot become a NumPy array without a copy; "
                             "use Tensor.host_view() on the cpu backend")
        arr = self.numpy()
        return arr if dtype is None else arr.astype(dtype, copy=False)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """Export as a legacy DLPack capsule (see ``interop.to_dlpack``); ``copy=True`` exports a
        fresh contiguous copy. ``max_version`` is accepted; the capsule is always unversioned.

        ``partition()`` refuses while a consumer holds the export. Refused (AliasError) while a
        pending operation uses the memory: the consumer could write it."""
        if copy:
            source = _from_host(self.numpy(), self.backend)
        else:
            self._check_use(ownership.WRITE, "export it through DLPack")
            source = self
        return interop.to_dlpack(source, stream=stream, dl_device=dl_device)

    def __dlpack_device__(self) -> tuple[int, int]:
        return interop.dlpack_device(self)

    @property
    def __cuda_array_interface__(self) -> dict:
        """CAI v3 for cuda tensors. AttributeError on cpu (so ``hasattr`` is False); TypeError
        for bf16."""
        if self.backend != "cuda":
            raise AttributeError("__cuda_array_interface__ exists only on cuda tensors")
        self._check_use(ownership.WRITE, "export it through __cuda_array_interface__")
        return interop.cuda_array_interface(self)


def _give_back_hint(held) -> str:
    owner = held.owner()
    return getattr(owner, "give_back_hint", "sync the pending operation first")


# -- layout helpers ----------------------------------------------------------------------------
def _prod(shape) -> int:
    size = 1
    for n in shape:
        size *= n
    return size


def overlaps(shape, strides) -> bool:
    """Whether two indices of a non-empty layout may address one element (see
    ``Tensor.has_internal_overlap``)."""
    axes = sorted((abs(s), n) for n, s in zip(shape, strides) if n > 1)
    span = 1  # elements covered by the faster axes so far
    for stride, n in axes:
        if stride < span:
            return True
        span += stride * (n - 1)
    return False


def _extent(shape, strides) -> tuple[int, int]:
    """``(lo, hi)`` element offsets from element 0 spanned by the elements, hi exclusive."""
    if 0 in shape:
        return 0, 0
    lo = sum(s * (n - 1) for n, s in zip(shape, strides) if s < 0)
    hi = sum(s * (n - 1) for n, s in zip(shape, strides) if s > 0) + 1
    return lo, hi


def _reshape_target(shape, old: tuple[int, ...]) -> tuple[int, ...]:
    """``shape`` with its -1 filled in (the element count of ``old`` kept); ShapeError."""
    try:
        dims = tuple(operator.index(n) for n in shape)
    except TypeError:
        raise ArgumentTypeError(f"a shape is ints or a tuple of ints, got {shape!r}") from None
    size = _prod(old)
    if dims.count(-1) > 1:
        raise ShapeError(f"cannot reshape to {dims}: only one extent may be -1")
    if any(n < -1 for n in dims):
        raise ShapeError(f"cannot reshape to {dims}: an extent is negative")
    if -1 in dims:
        known = _prod(n for n in dims if n != -1)
        if known == 0 or size % known:
            raise ShapeError(f"cannot reshape a tensor of shape {old} ({size} elements) to "
                             f"{dims}: no extent for -1 keeps the element count")
        dims = tuple(size // known if n == -1 else n for n in dims)
    if _prod(dims) != size:
        raise ShapeError(f"cannot reshape a tensor of shape {old} ({size} elements) to {dims} "
                         f"({_prod(dims)} elements)")
    return dims


def _reshaped_strides(shape, strides, new) -> tuple[int, ...] | None:
    """The element strides of ``new`` over the layout ``shape``/``strides`` in C order, or
    None when that needs a copy. Axes of extent 1 are free; the others are matched in groups
    of equal products, and each old group must be one contiguous run (stride[i] ==
    stride[i + 1] * shape[i + 1]), whose new axes then split its innermost stride."""
    if 0 in shape:
        return interop.c_strides(new)
    old = [(n, s) for n, s in zip(shape, strides) if n != 1]
    out = [0] * len(new)
    i = j = 0  # next old axis, next new axis
    while i < len(old):
        start_i, start_j = i, j
        have, want = old[i][0], 1
        i += 1
        while want != have or j == start_j:
            if want < have or i == len(old):
                want *= new[j]
                j += 1
            else:
                have *= old[i][0]
                i += 1
        for k in range(start_i, i - 1):
            if old[k][1] != old[k + 1][0] * old[k + 1][1]:
                return None
        step = old[i - 1][1]
        for k in range(j - 1, start_j - 1, -1):
            out[k] = step
            step *= new[k]
    for k in range(j, len(new)):  # trailing axes of extent 1
        out[k] = out[j - 1] if j else 1
    return tuple(out)


def _expand_key(key, ndim: int) -> tuple:
    """The index as one entry per axis: Ellipsis expanded, missing trailing axes as ``:``."""
    key = key if isinstance(key, tuple) else (key,)
    ellipses = sum(k is Ellipsis for k in key)
    if ellipses > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    given = len(key) - ellipses
    if given > ndim:
        raise IndexError(f"too many indices for a {ndim}-d tensor: {given} given")
    fill = (slice(None),) * (ndim - given)
    if ellipses:
        at = key.index(Ellipsis)
        return key[:at] + fill + key[at + 1:]
    return key + fill


def _axis_index(k, axis: int, n: int) -> int:
    if isinstance(k, (bool, np.bool_)) or k is None:
        raise TypeError(f"tensor index {k!r} is not supported: only ints, slices and '...' "
                        "(basic indexing) are")
    try:
        i = operator.index(k)
    except TypeError:
        raise TypeError(f"tensor index of type {type(k).__name__} is not supported: only ints, "
                        "slices and '...' (basic indexing, no index arrays)") from None
    if not -n <= i < n:
        raise IndexError(f"index {i} is out of bounds for axis {axis} with size {n}")
    return i + n if i < 0 else i


class _HostSpan:
    """Host bytes ``[ptr, ptr + nbytes)`` exposed to NumPy (array interface); keeps owner alive."""

    def __init__(self, ptr: int, nbytes: int, readonly: bool, owner):
        self.owner = owner
        self.__array_interface__ = {"data": (ptr, readonly), "shape": (nbytes,),
                                    "typestr": "|u1", "version": 3}


def _over(ptr: int, shape, strides, dtype, backend: str, owner, readonly: bool = False) -> Tensor:
    """A Tensor whose element 0 is at ``ptr``; its buffer is the byte span of its elements."""
    shape, strides = tuple(shape), tuple(strides)
    lo, hi = _extent(shape, strides)
    base = ptr + lo * dtype.itemsize
    if backend == "cpu":
        owner = np.asarray(_HostSpan(base, (hi - lo) * dtype.itemsize, readonly, owner))
    return Tensor(shape=shape, strides=strides, dtype=dtype, backend=backend, offset=-lo,
                  base_ptr=base, owner=owner, readonly=readonly)


_TORCH_DTYPES: dict | None = None  # torch dtype -> DType (runtime/args.py's table)


def _from_torch(obj) -> Tensor | None:
    """A torch CUDA tensor read through its own attributes, as the launch fast path reads it
    (``args.of_torch``), instead of a DLPack export (tens of microseconds); None where the
    export must decide: not torch, another GPU, a layout or dtype it handles or refuses
    (sparse, negated or conjugated views, tensors that require grad), or a current torch
    stream that is not ours (the export orders it before ours; the same stream needs
    nothing). The tensor keeps its memory alive, as the export's view did."""
    global _TORCH_DTYPES
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(obj, torch.Tensor):
        return None
    if _TORCH_DTYPES is None:
        from fearless.runtime import args
        if not args._TORCH_DTYPES:
            args._torch_dtypes()
        _TORCH_DTYPES = args._TORCH_DTYPES
    dt = _TORCH_DTYPES.get(obj.dtype)
    if dt is None or not obj.is_cuda or obj.layout is not torch.strided or obj.requires_grad \
            or obj.is_neg() or obj.is_conj():
        return None
    dev = obj.get_device()
    if dev != cuda_device().device_id:
        return None
    theirs, ours = torch._C._cuda_getCurrentRawStream(dev), memory.cuda_stream().handle
    if theirs != ours and not (theirs == 0 and ours == stream.LEGACY):  # both legacy default
        return None
    return _over(obj.data_ptr(), obj.shape, obj.stride(), dt, "cuda", obj)


def _wrap_host(arr: np.ndarray) -> Tensor:
    """A cpu Tensor over ``arr``'s memory (no copy). TypeError for unsupported dtypes/strides."""
    dt = dtypes.from_numpy(arr.dtype)
    if any(s % dt.itemsize for s in arr.strides):
        raise TypeError(f"array strides {arr.strides} are not multiples of its itemsize "
                        f"{dt.itemsize}; pass numpy.ascontiguousarray(a)")
    strides = tuple(s // dt.itemsize for s in arr.strides)
    return _over(arr.ctypes.data, arr.shape, strides, dt, "cpu", arr, not arr.flags.writeable)


def _alloc(shape: tuple[int, ...], dt: dtypes.DType) -> Tensor:
    """An uninitialised contiguous cuda tensor in fresh device memory."""
    nbytes = _prod(shape) * dt.itemsize
    stream = memory.cuda_stream()
    buf = memory.allocate(nbytes, stream)
    t = Tensor(shape=shape, strides=interop.c_strides(shape), dtype=dt, backend="cuda",
               offset=0, base_ptr=int(buf.handle), owner=memory.StreamOrdered(buf, stream))
    t._storage.home = stream.handle
    t._facts = (True, (t._base_ptr, t._base_ptr + nbytes), False)  # what _layout() finds
    return t


def _from_host(arr: np.ndarray, backend: str) -> Tensor:
    """``arr`` on ``backend``: wrapped without a copy on cpu, uploaded to a new buffer on cuda."""
    if backend == "cpu":
        return _wrap_host(arr)
    host = np.asarray(arr, order="C")
    t = _alloc(host.shape, dtypes.from_numpy(host.dtype))
    memory.copy_host_to_device(t.data_ptr(), host, t.nbytes)
    return t


def _convert(t: Tensor, dt: dtypes.DType) -> Tensor:
    """A copy of ``t`` cast to ``dt`` (a kernel cast's rules: ``dtypes.convert``), on ``t``'s
    backend."""
    return _from_host(dtypes.convert(t.numpy(), dt), t.backend)


def _normalize_shape(shape) -> tuple[int, ...]:
    dims = (shape,) if not isinstance(shape, (tuple, list)) else shape
    dims = tuple(operator.index(n) for n in dims)
    if any(n < 0 for n in dims):
        raise ValueError(f"shape {dims} has a negative dimension")
    return dims


# -- factories ---------------------------------------------------------------------------------
def as_tensor(obj) -> Tensor | None:
    """``obj`` as a Tensor without a copy, or None when it does not live on the current backend.

    A Tensor is returned as is. On cpu: a NumPy array or a CPU DLPack producer (a torch CPU
    tensor). On cuda: a ``__cuda_array_interface__`` or CUDA DLPack producer (torch, CuPy) on
    fearless's GPU; the view keeps the producer alive and is ordered after its stream. Anything
    else (scalars, lists, host arrays on cuda, device arrays on cpu or another GPU) gives None.
    Raises TypeError for such an array with a dtype fearless does not support.
    """
    if isinstance(obj, Tensor):
        return obj
    backend = current_backend()
    if backend == "cpu" and isinstance(obj, np.ndarray):
        return _wrap_host(obj)
    if backend == "cuda" and type(obj).__name__ in ("Tensor", "Parameter"):
        t = _from_torch(obj)
        if t is not None:
            return t
    if interop.foreign_device(obj) != backend:
        return None
    if backend == "cpu":
        f = interop.view_foreign(obj, -1)
    else:
        f = interop.view_foreign(obj, memory.cuda_stream().handle)
        if f.device_id != cuda_device().device_id:
            return None
    return _over(f.ptr, f.shape, f.strides, f.dtype, backend, f.owner, f.readonly)


@user_facing
def asarray(obj, dtype: dtypes.DTypeLike | None = None) -> Tensor:
    """``obj`` as a Tensor on the current backend, copying only when it must.

    ``obj``: a Tensor (returned as is, or converted when ``dtype`` differs), anything
    ``as_tensor`` views without a copy (a NumPy array on cpu, a CUDA array on cuda), or host
    data (NumPy arrays, lists, scalars, CPU DLPack producers), copied to the device on cuda.
    ``dtype``: anything ``fearless.dtypes.coerce`` accepts; converting always copies. Raises
    TypeError for unsupported dtypes and for a CUDA array while the cpu backend is current.
    """
    dt = None if dtype is None else dtypes.coerce(dtype)
    t = as_tensor(obj)
    if t is not None:
        return t if dt is None or dt is t.dtype else _convert(t, dt)
    backend, where = current_backend(), interop.foreign_device(obj)
    if where == "cuda":
        raise TypeError(f"this {type(obj).__name__} is a CUDA array the {backend} backend cannot "
                        "use without a copy (the cpu backend is current, or it is on another "
                        "GPU); copy it first")
    if where == "cpu" and not isinstance(obj, np.ndarray):
        # Through DLPack rather than NumPy's own conversion, which knows no bf16.
        f = interop.view_foreign(obj, -1)
        obj = _over(f.ptr, f.shape, f.strides, f.dtype, "cpu", f.owner, True).host_view()
    host = np.asarray(obj)
    if dt is not None and host.dtype != dt.numpy:  # Python floats round once, even into bf16
        host = dtypes.convert(host, dt)
    return _from_host(host, backend)


@user_facing
def empty(shape, dtype: dtypes.DTypeLike = dtypes.f32) -> Tensor:
    """An uninitialised tensor of ``shape`` (int or tuple) and ``dtype`` on the current backend."""
    dims, dt = _normalize_shape(shape), dtypes.coerce(dtype)
    if current_backend() == "cpu":
        return _wrap_host(np.empty(dims, dt.numpy))
    return _alloc(dims, dt)


@user_facing
def full(shape, value, dtype: dtypes.DTypeLike) -> Tensor:
    """A tensor of ``shape`` filled with ``value`` converted to ``dtype`` (NumPy's rules).

    Raises OverflowError / ValueError when ``value`` does not fit ``dtype``.
    """
    dims, dt = _normalize_shape(shape), dtypes.coerce(dtype)
    if current_backend() == "cpu":
        return _wrap_host(np.full(dims, value, dt.numpy))
    pattern = np.full((), value, dt.numpy).tobytes()
    if pattern.count(pattern[0]) != len(pattern):  # not one repeated byte: no memset can do it
        return _from_host(np.full(dims, value, dt.numpy), "cuda")
    t = _alloc(dims, dt)
    memory.memset(t.data_ptr(), pattern[0], t.nbytes)
    return t


@user_facing
def zeros(shape, dtype: dtypes.DTypeLike = dtypes.f32) -> Tensor:
    """A tensor of ``shape`` filled with 0 of ``dtype`` on the current backend."""
    return full(shape, 0, dtype)


@user_facing
def ones(shape, dtype: dtypes.DTypeLike = dtypes.f32) -> Tensor:
    """A tensor of ``shape`` filled with 1 of ``dtype`` on the current backend."""
    return full(shape, 1, dtype)
