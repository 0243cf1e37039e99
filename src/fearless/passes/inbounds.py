"""Prove bounds-checked reads (and guarded writes) in bounds from the guards around them.

Runs after ``bounds``. A read ``x[e0, e1, ...]`` needs no check when every index is provably
``0 <= e < extent``. Indices are i64 linear forms, and the facts true at the read come from the
guards around it (``analysis/linear.py``):

- ``e < B`` when some guard gives ``f < B`` with ``f - e >= 0``, or ``B - 1 - e >= 0``, where a
  form is ``>= 0`` when its constant and every coefficient are, over non-negative atoms;
- ``e <= c`` for a constant c from loop bounds, casts, ``fl.warp.lane()`` (31) and an exact
  contract block (the thread's slot in the block, ``fl.warp.index()``), against the constant
  extent of a shared array.

When the bound ``B`` is another array's extent (``i < len(out)`` guarding ``x[i]``), the proof
holds only when ``len(x) >= len(out)``: such facts become host-checked preconditions,
``fn.attrs["bounds_preconditions"]``, tuples ``(array, axis, other array, other axis)`` meaning
``extent(array, axis) >= extent(other, other axis)``, ``(array, axis, None, c)`` meaning
``extent(array, axis) >= c``, or ``(array, axis, THREADS, a)`` meaning ``extent(array, axis) >=``
the launch's threads along grid axis a (0: x, 1: y, 2: z): an unguarded ``x[r, c]`` indexed by the
global thread index itself (or by ``block_index(a) * block_dim(a) + thread_in_block(a)``). The
launch evaluates them (a few integer compares) and runs a variant compiled with
``PassOptions(prove_bounds=False)``, every read checked, when one fails, so an out-of-bounds read
is still reported as before, with the same site numbers.
A proven read keeps its ``site`` and gets ``checked = False``, ``proved = True``. Writes are
proved the same way: a store always skips an out-of-bounds element (the last block's tail), and a
``proved`` store needs no such branch, so the stores of an unrolled loop stay straight-line code.
"""
from __future__ import annotations

import math

from fearless.analysis import owners, strided
from fearless.analysis.linear import Facts, difference, is_i64
from fearless.ir.core import Function
from fearless.ir.opdef import Op
from fearless.ir.types import Access


def run(fn: Function, options) -> Function:
    fn.attrs["bounds_preconditions"] = ()
    if not options.bounds_checks or not getattr(options, "prove_bounds", True):
        return fn
    prover = _Prover(fn, getattr(options, "block", None))
    prover.region(fn.body, frozenset())
    fn.attrs["bounds_preconditions"] = tuple(sorted(prover.preconditions, key=repr))
    return fn


class _Prover(Facts):
    """``Facts`` that proves each checked read, each store and each async copy's destination
    as the walk reaches it; ``preconditions`` collects the host checks the proofs need."""

    def __init__(self, fn: Function, block):
        super().__init__(fn, block)
        self.preconditions = set()

    def access(self, op, facts) -> None:
        if op.name == Op.MEM_ASYNC_COPY:
            self._prove_copy_destination(op)
        elif op.name == Op.MEM_STORE or op.attrs.get("checked"):
            self.try_prove(op, facts)

    # the proof -------------------------------------------------------------------------------

    def try_prove(self, op, facts) -> None:
        arr = op.operands[0]
        ndim = arr.type.ndim
        indices = op.operands[1:1 + ndim]
        shared = arr.type.access is Access.SHARED
        shape = self.defs[id(arr)].attrs["shape"] if shared else None
        if shared and not isinstance(shape, tuple):
            shape = (shape,)
        if shared and shape[0] is not None and self._enumerated(op, shape):
            op.attrs["checked"] = False
            op.attrs["proved"] = True
            return
        if op.name == Op.WARP_LDMATRIX:
            return
        need = set()
        for axis, idx in enumerate(indices):
            if not is_i64(idx):
                return
            low = self.nonneg(idx)
            if low is None:
                self._nonneg_keys = self._collect_nonneg_atoms(idx)
                if not self._form_nonneg(self.linear(idx)):
                    return
                low = frozenset()
            need |= low
            if shared:
                up = self.upper(idx)
                if up is None or shape[axis] is None or up >= shape[axis]:  # None: dynamic
                    return
                continue
            extent = ("dim", self._array_key(arr), axis)
            up = self._prove_below(idx, extent, facts)
            if up is None:
                return
            need |= up
        op.attrs["checked"] = False
        op.attrs["proved"] = True
        self.preconditions |= need

    def _block_points(self, op):
        """[(thread, index tuple)] of every thread of the contract's block that reaches ``op``
        (an access of a shared array at indices computed from the thread's coordinates,
        constants and constant-bound loop counters; ``analysis/owners.py``), or None."""
        if not self.block:
            return None
        try:
            points, (blocks, offsets) = owners.Model(self, self.block).access(op)
        except owners.Unproven:
            return None
        return None if blocks or offsets else points

    def _enumerated(self, op, shape) -> bool:
        """Whether every thread that reaches ``op`` (``_block_points``) stays inside the static
        ``shape``; an ``ldmatrix`` row also needs its 8 elements inside and a 16-byte aligned
        start."""
        points = self._block_points(op)
        if points is None:
            return False
        row = 8 if op.name == Op.WARP_LDMATRIX else 1
        strides = [math.prod(shape[k + 1:]) for k in range(len(shape))]
        itemsize = op.operands[0].type.dtype.itemsize
        for _, element in points:
            if any(not 0 <= e < n for e, n in zip(element, shape)) or \
                    element[-1] + row > shape[-1]:
                return False
            if row > 1 and sum(e * s for e, s in zip(element, strides)) * itemsize % 16:
                return False
        return True

    def _prove_copy_destination(self, op) -> None:
        """``dst_proved`` on an async copy whose destination chunk (the last index counts
        ``size``-byte chunks) lies inside its static shared array for every thread of the block:
        the copy then needs no branch around it."""
        dst = op.operands[0]
        shape = self.defs[id(dst)].attrs["shape"] if id(dst) in self.defs else None
        points = self._block_points(op) if shape is not None else None
        if points is None:
            return
        shape = shape if isinstance(shape, tuple) else (shape,)
        chunk = op.attrs["size"] // dst.type.dtype.itemsize
        if all(0 <= e < n for _, element in points for e, n in zip(element[:-1], shape)) and \
                all(0 <= element[-1] and (element[-1] + 1) * chunk <= shape[-1]
                    for _, element in points):
            op.attrs["dst_proved"] = True

    def _prove_below(self, idx, extent, facts):
        """Preconditions under which idx < extent(array, axis), or None."""
        arr_key, axis = extent[1], extent[2]
        form = self.linear(idx)
        self._nonneg_keys = self._collect_nonneg_atoms(idx)
        # a clamp: min(..., extent - c) with c >= 1
        op = self.defs.get(id(idx))
        if op is not None and op.name == Op.MIN:
            for v in op.operands:
                c, terms = self.linear(v)
                if terms == ((extent, 1),) and c <= -1:
                    return frozenset()
        best = None
        threads = _global_thread_axis(form)
        if threads is None:
            threads = self._spelled_thread_axis(idx)
        if threads is not None and arr_key[0] == "param":  # launched threads <= extent
            best = frozenset({(arr_key[1], axis, THREADS, threads)})
        for fact_form, bound in facts:
            if bound[0] != "dim" or bound[1][0] != "param":
                continue
            diff = difference(fact_form, form)
            self._nonneg_keys |= {k for k, _ in fact_form[1] if self._fact_atom_nonneg(k)}
            if not self._form_nonneg(diff):
                continue
            if bound == extent:
                return frozenset()
            if arr_key[0] == "param":
                best = frozenset({(arr_key[1], axis, bound[1][1], bound[2])})
        return best

    def _spelled_thread_axis(self, idx):
        """For ``block_index(a) * block_dim(a) + thread_in_block(a)`` (through locals too): the
        launch axis whose launched threads bound it, as for the global thread index; else
        None."""
        form = self.resolved(idx)
        kind = strided.coordinate(form, self.block) if len(form[1]) == 2 else None
        return kind.axis if kind is not None and kind.name == "grid" and not kind.one_d else None

    def _fact_atom_nonneg(self, key) -> bool:
        return key[0] in ("index", Op.SIMT_THREAD_INDEX, Op.SIMT_SPECIAL, "dim")


THREADS = "<threads>"


def _global_thread_axis(form):
    """For a form that is exactly a global thread index: the launch axis (0: x, 1: y, 2: z)
    whose launched threads bound it; else None."""
    const, terms = form
    if const != 0 or len(terms) != 1 or terms[0][1] != 1 or terms[0][0][0] != "index":
        return None
    inner = terms[0][0][1]
    if inner[0] != Op.SIMT_THREAD_INDEX:
        return None
    attrs = dict(inner[1])
    if attrs.get("block"):
        return None
    return attrs["space"] - 1 - attrs["axis"]  # the last index is x
