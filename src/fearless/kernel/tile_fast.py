"""The tile call's fast path: a TilePlan per argument signature (as ``runtime/plan.py`` is for
SIMT launches).

``signature(kernel, args)`` reads a call's arguments once (``runtime/args.py`` views) into a key:
per Out its partition's tensor view key, tile shape and layout facts; per In its view key and
layout facts (the alignment and divisibility facts are part of a tile specialisation, see
``ir.types.Layout``); per ``ft.Const`` its type and value (``params.const_key``: 0.0 is not
-0.0); per scalar its type. After a first call has checked everything the slow way and
compiled, the kernel keeps a plan under that key; a repeat
call builds its ``DeviceOperation`` from the plan with the per-call checks only: partitions
free, one grid over every Out, no memory shared between an Out or Atomic tensor and another
argument, fearless inputs and Atomic tensors neither moved nor claimed by a pending operation
(else the slow path, which raises the error), the kernel's ``requires=`` relations, the scalars'
conversions. Anything else (keyword arguments, defaults, arguments of other types, foreign
Atomic tensors) takes the slow path.
"""
from __future__ import annotations

from math import prod

from fearless.errors import ArgumentTypeError
from fearless.kernel.params import ATOMIC, CONST, IN, OUT, SCALAR, const_key
from fearless.passes.stream_k import I32_LIMIT
from fearless.runtime import args as args_, pack
from fearless.runtime.args import HI, LO, OBJ, PTR, SCALAR_TYPES, SHAPE, STRIDES, converter, \
    library_streams
from fearless.runtime.lazy import DeviceOperation
from fearless.runtime.partition import Partition, StreamK
from fearless.runtime.stream import check_order, follow
from fearless.runtime.tensor import Tensor
from fearless.runtime.tile_launch import arguments, fits, hardware_grid

INDEX_LIMIT = 1 << 31  # extents and strides travel as i32 (as in cuTile)


def pow2_div(n: int, cap: int = 16) -> int:
    """The largest power of two dividing ``n``, at most ``cap`` (``cap`` for 0)."""
    n = abs(int(n))
    return cap if n == 0 else min(n & -n, cap)


def layout_facts(view):
    """The ``ir.types.Layout`` fields of a view (None when an extent or stride needs more than
    32 bits: the slow path refuses it). ``pow2_div`` written inline (``n & -n`` is the lowest
    set bit of ``|n|``): a launch pays this per argument."""
    shape, strides = view[SHAPE], view[STRIDES]
    if shape and (max(shape) >= INDEX_LIMIT or max(strides) >= INDEX_LIMIT
                  or min(strides) <= -INDEX_LIMIT):
        return None
    ptr = view[PTR]
    return ((min(ptr & -ptr, 16) if ptr else 16),
            tuple([min(n & -n, 16) if n else 16 for n in shape]),
            tuple([min(n & -n, 16) if n else 16 for n in strides]),
            len(shape) > 0 and (strides[-1] == 1 or shape[-1] == 1))


def _tensor_facts(t: Tensor, view):
    """``layout_facts`` of a fearless Tensor, kept on it (its layout never changes; False
    stands for None)."""
    facts = t._tile_facts
    if facts is None:
        facts = t._tile_facts = layout_facts(view) or False
    return facts or None


def signature(params, args, per_sm):
    """``(key, views, outs, values)`` of a cuda call with positional ``args`` (``values``: the
    runtime arguments, ``ft.Const`` ones left out), or None when the fast path does not
    apply. ``per_sm(backend)``: the kernel's persistent blocks per SM (asked only for a
    persistent partition: whether it launches one tile per block is part of the key)."""
    if len(args) != len(params):
        return None
    readers = args_.READERS_CUDA
    key, views, outs, values = [], [], [], []
    for p, v in zip(params, args):
        kind = type(v)
        pk = p.kind
        if pk is CONST:  # by type and, for floats, bits: 0.0 and -0.0 compile apart
            key.append((kind, v) if kind is int or kind is bool else const_key(v))
            continue
        if pk is OUT:
            if kind is not Partition or v._ended or v._holder is not None:
                return None
            view = args_.of_tensor(v._tensor)
            facts = _tensor_facts(v._tensor, view)
            schedule = v.schedule
            if schedule is not None:   # which compiled forms launch follows from the tile count
                n = per_sm("cuda")
                schedule = (schedule, v.one_tile_each(n),
                            v.stream_k_phases(n) if type(schedule) is StreamK else ())
            key.append((view[0], v.tile_shape, schedule, facts))
            outs.append(v)
        elif pk is IN or pk is ATOMIC:
            if kind is Partition:
                return None
            read = readers.get(kind) or args_.reader(kind, "cuda")
            view = read(v, 0)
            if view is None:
                return None
            facts = _tensor_facts(v, view) if kind is Tensor else layout_facts(view)
            key.append((view[0], facts))
        elif pk is SCALAR and kind in SCALAR_TYPES:
            key.append((kind, -(1 << 31) <= v < (1 << 31)) if kind is int else kind)
            views.append(v)
            values.append(v)
            continue
        else:
            return None
        if facts is None:
            return None
        views.append(view)
        values.append(v)
    return tuple(key), views, outs, tuple(values)


class TilePlan:
    """One compiled tile kernel for one argument signature, ready to build operations.

    ``loaded``: the LoadedTile, or a stream-K call's, one per launch in order (their key holds
    the partition's ``stream_k_phases``, so a plan's launches are those of every call it
    serves); ``scalars``: (index among runtime parameters, name,
    ``args.converter``) triples; ``ins``/``atomics``/``outs``: which runtime parameters are In
    tensors, Atomic tensors and Outs; ``requires``: None, or a check of the kernel's
    ``requires=`` relations that takes the runtime arguments (the constants are part of the
    plan's key)."""

    __slots__ = ("kernel", "launches", "scalars", "ins", "atomics", "outs", "label", "names",
                 "written", "requires", "per_sm")

    def __init__(self, kernel: str, runtime_params, loaded, scalar_dtypes: dict,
                 requires=None, per_sm: int = 1):
        self.launches = tuple(loaded) if isinstance(loaded, (tuple, list)) else (loaded,)
        self.kernel, self.requires = kernel, requires
        self.per_sm = per_sm    # a persistent launch's default tile blocks per SM
        self.scalars = tuple((k, runtime_params[k].name, converter(dt))
                             for k, dt in scalar_dtypes.items())
        self.ins = tuple(k for k, p in enumerate(runtime_params) if p.kind is IN)
        self.atomics = tuple(k for k, p in enumerate(runtime_params) if p.kind is ATOMIC)
        self.outs = tuple(k for k, p in enumerate(runtime_params) if p.kind is OUT)
        self.label = f"kernel '{kernel}'"
        self.names = [p.name for p in runtime_params]
        self.written = [k in self.outs or k in self.atomics for k in range(len(runtime_params))]

    def operation(self, runtime_args, views, partitions):
        """The DeviceOperation of one call, or None when a per-call check needs the slow path
        (which raises the right error)."""
        first = partitions[0]
        for part in partitions:
            if part.grid != first.grid or part.schedule != first.schedule:
                return None
        if type(first.schedule) is StreamK and prod(first.grid) >= I32_LIMIT:
            return None   # the slow path's ContractError (the key does not hold the shape)
        grid = first.launch_grid(self.per_sm)
        reads, writes = [], []
        for k in self.ins + self.atomics:
            obj = views[k][OBJ]
            if type(obj) is Tensor:
                if obj._moved is not None or obj._storage.claims:
                    return None
                (reads if k in self.ins else writes).append(obj)
            elif k in self.atomics:
                return None  # a foreign tensor written: the slow path's checks
        for w in self.outs + self.atomics:
            lo, hi = views[w][LO], views[w][HI]
            if lo == hi:
                continue
            for k, v in enumerate(views):
                if k != w and type(v) is tuple and v[LO] < hi and lo < v[HI]:
                    return None
        if self.requires is not None:
            self.requires(runtime_args)
        a = list(views)
        try:
            for k, name, convert in self.scalars:
                a[k] = convert(name, runtime_args[k])
        except ArgumentTypeError as exc:
            raise exc.with_kernel(self.kernel) from None
        foreign = library_streams([views[k][OBJ] for k in self.ins])
        launches, name, names, written = self.launches, self.kernel, self.names, self.written
        hw = hardware_grid(grid, launches[0].grouped)
        if not fits(hw):
            return None   # the slow path's ContractError
        empty = 0 in grid
        tensors = [v[OBJ] if type(v) is tuple and type(v[OBJ]) is Tensor else None for v in views]

        def enqueue(stream):
            check_order(stream, name, names, tensors, written)
            for theirs in foreign:   # torch's or CuPy's work before the call, on any stream
                follow(stream, theirs)
            if not empty:
                for loaded in launches:   # a stream-K call's launches add its workspace
                    pack.launch(loaded.function, hw, (1, 1, 1), 0, stream.handle,
                                loaded.params.fill(arguments(loaded, a, grid, stream)
                                                   if loaded.stream_k else a), name, loaded.pdl)
        return DeviceOperation(enqueue, runtime_args, reads=reads, writes=writes,
                               partitions=partitions, label=self.label)
