"""Tile-kernel IR -> CUDA Tile IR (the ``tir`` model), one rule per op in ``RULES``.

The entry ABI: per tensor parameter a ``tile<ptr<T>>`` then its extents and element strides as
``tile<i32>`` (the last stride is left out when it is statically 1); per scalar a 0-d tile of its
dtype. Launch with block (1, 1, 1) and grid = the Out partition's tile grid.

What the prologue tells tileiras (the facts that make TMA and tensor cores possible,
reference/tile-ir.md section 5): the pointer's alignment (``assume div_by``), extents and strides
as non-negative and divisible by their power-of-two factors, and a static unit inner stride.

Our IR keeps Python variables in slots (``local.*``); Tile IR is pure SSA, so the lowering tracks
each slot's current value; ``control.py`` turns the slots a loop or an ``if`` may change into its
carried values or results, and lowers ``while``, ``break``, ``continue`` and ``return``.

The IR it lowers has been through the tile passes (``passes.TILE_PASSES``): ``tile_subset``
refused what has no rule here, so a missing rule is a fearless bug; ``memory_order`` marked the
loads and stores that must be ordered (attr ``order``).

Memory order: Tile IR leaves two memory operations unordered unless a token connects them, so
every access that ``memory_order`` marked waits for the token of the last conflicting operation
on its tensor (the memory-token slots of ``memory.py``, which also lowers gathers, scatters and
atomics); they travel through ``for`` and ``if`` like the variables' slots.
"""
from __future__ import annotations

import functools
import math

from fearless.backends.tileir import control, mathlib, memory, schedule, special, stream_k, \
    tir
from fearless.backends.tileir.builder import Builder
from fearless.backends.tileir.hints import sm_number
from fearless.compiler.abi import SCALAR, Abi, Slot, array_slots, scalar_code
from fearless.dtypes import DType, int_range
from fearless.errors import InternalError
from fearless.ir import types as T
from fearless.ir.core import Function, Region
from fearless.backends.tileir.memory import LAST_OP as _LAST_OP, LAST_STORE as _LAST_STORE
from fearless.ir.opdef import Op
from fearless.passes.memory_order import MEMORY as _MEMORY, WRITES as _WRITES, Order
from fearless.passes.tile_subset import UNSUPPORTED

_SCALARS = {"bool": tir.I1, "i8": tir.I8, "i16": tir.I16, "i32": tir.I32, "i64": tir.I64,
            "u8": tir.I8, "u16": tir.I16, "u32": tir.I32, "u64": tir.I64, "f16": tir.F16,
            "bf16": tir.BF16, "f32": tir.F32, "f64": tir.F64}


def elem(d: DType) -> tir.ScalarType:
    return _SCALARS[d.name]


def tile_type(t) -> tir.TileType:
    if isinstance(t, T.Tile):
        return tir.tile(elem(t.dtype), t.shape)
    return tir.tile(elem(t.dtype))


def abi(types, workspace: bool = False) -> Abi:
    """The entry parameters for IR parameter types, in the order ``Lowering`` declares them: per
    tensor its pointer, i32 extents and the i32 strides of all axes but a unit-stride inner one;
    per scalar its value; with ``workspace`` (a stream-K kernel, ``stream_k.py``) then an
    array of one axis, the partial sums, as parameter ``len(types)``. The launcher packs
    arguments in this order."""
    slots = []
    for i, t in enumerate(types):
        if isinstance(t, T.TensorView):
            slots += array_slots(i, t.ndim, t.ndim - (1 if t.layout.unit_inner else 0), "i")
        else:
            slots.append(Slot(SCALAR, i, 0, scalar_code(t.dtype)))
    if workspace:
        slots += array_slots(len(types), 1, 0, "i")
    return Abi(tuple(slots))


GROUP_M = 8  # tile rows per group of the grouped launch order


def is_grouped(types) -> bool:
    """Whether a kernel with these parameter types launches in grouped order: kernels whose
    (first) Out partition is 2-d launch 1-d and map block ids to tiles in groups (see
    ``Lowering.grouped``); the launcher multiplies the grid out (``runtime/tile_launch.hardware_grid``)."""
    outs = [t for t in types if isinstance(t, T.TensorView) and t.role is T.Role.OUT]
    return bool(outs) and outs[0].ndim == 2 and (outs[0].schedule is None
                                                 or outs[0].schedule.single)


def grouped_output(fn: Function):
    """The Out parameter a grouped launch order follows, or None."""
    if not is_grouped([p.type for p in fn.params]):
        return None
    return next(p.value for p in fn.params
                if isinstance(p.type, T.TensorView) and p.type.role is T.Role.OUT)


class _View:
    """One tensor parameter in Tile IR: its tensor view, base pointer, extents and element
    strides (i32; None for a static unit stride) and partition views."""

    def __init__(self, view, ptr, dims, strides, ty: T.TensorView):
        self.view, self.ptr, self.dims, self.strides, self.type = view, ptr, dims, strides, ty
        self.parts: dict = {}


class Lowering:
    def __init__(self, fn: Function, version: tuple[int, int], hints: dict | None,
                 arch: str | None = None, scalar_access: bool = False, tma: bool = True):
        self.fn, self.arch, self.scalar_access, self.tma = fn, arch, scalar_access, tma
        self.module = tir.Module(version)
        params = []
        for p in fn.params:
            if isinstance(p.type, T.TensorView):
                params.append(tir.tile(tir.ptr(elem(p.type.dtype))))
                params += [tir.tile(tir.I32)] * p.type.ndim
                params += [tir.tile(tir.I32)] * (p.type.ndim - (1 if p.type.layout.unit_inner
                                                                else 0))
            else:
                params.append(tile_type(p.type))
        params += stream_k.entry_params(fn, elem)
        self.entry = self.module.entry(fn.name, params, hints or None)
        self.b: Builder = self.entry.builder()
        self.env: dict[int, object] = {}
        self.slots: dict[int, object] = {}
        self.views: dict[int, _View] = {}
        self.narrow: dict[int, object] = {}  # an exti'd i64 -> its i32 source (index operands)
        self.exits: list = []  # control.py: the loops and return targets around the op
        self.tail = False  # whether the op being lowered is in tail position (region())
        self.condition = None  # the value of the last scf.condition (a while's test)
        self.workspace = None  # a stream-K kernel's (partials view, tile shape)

    # values -----------------------------------------------------------------------------------

    def v(self, value):
        try:
            return self.env[id(value)]
        except KeyError:
            raise InternalError(f"tile lowering: {value!r} used before definition") from None

    def set(self, op, value) -> None:
        self.env[id(op.results[0])] = value

    def const(self, value, d: tir.ScalarType, shape=()):
        return self.b.constant(value, tir.tile(d, shape))

    # prologue ---------------------------------------------------------------------------------

    def prologue(self) -> None:
        b = self.b
        args = iter(self.entry.params)
        for p in self.fn.params:
            if not isinstance(p.type, T.TensorView):
                self.env[id(p.value)] = next(args)
                continue
            t, lay = p.type, p.type.layout
            ptr = next(args)
            align = min(lay.align, t.dtype.itemsize) if self.scalar_access else lay.align
            if align > 1:
                ptr = b.assume_div_by(ptr, align)
            dims = [self._fact(next(args), div) for div in (lay.shape_div or (1,) * t.ndim)]
            n_dyn = t.ndim - (1 if lay.unit_inner else 0)
            strides = [self._fact(next(args), div)
                       for div in (lay.stride_div or (1,) * t.ndim)[:n_dyn]]
            static = [None] * n_dyn + ([1] if lay.unit_inner else [])
            tv = tir.tensor_view(elem(t.dtype), [None] * t.ndim, static)
            view = b.make_tensor_view(ptr, tv, dims, strides)
            self.views[id(p.value)] = _View(view, ptr, dims, strides + [None] * (t.ndim - n_dyn),
                                            t)
        # every partition view the kernel uses, made here so that they dominate every use
        for op in self.fn.walk():
            if op.name == Op.TILE_LOAD:
                self.partition(op.operands[0], op.attrs["shape"], op.attrs.get("padding"))
            elif op.name in (Op.TILE_LOAD_OWN, Op.TILE_STORE):
                self.partition(op.operands[0], op.operands[0].type.tile_shape)
        if uses_pdl(self.module.version, self.arch):
            # programmatic dependent launch: every memory operation takes this token or one
            # made after it, so none runs before the grids this one depends on are done
            b.gdc_launch_dependents()
            self.token = b.gdc_wait()
        else:
            self.token = b.make_token()
        stream_k.prologue(self, args, elem)  # the entry's last parameters
        ordered = {id(op.operands[0]) for op in self.fn.walk()
                   if op.name in _MEMORY and op.attrs.get("order") is not None}
        for p in self.fn.params:
            if id(p.value) in ordered:
                self.slots[_LAST_OP, id(p.value)] = self.slots[_LAST_STORE, id(p.value)] = \
                    self.token
        # the launch's block coordinates; tile.select (a persistent launch) replaces
        # block_ids, the own tile's coordinates, once per tile
        self.launch_ids = self.block_ids = b.get_tile_block_id()
        out = grouped_output(self.fn)
        if out is not None:
            rows, cols = schedule.tile_grid(self, out)[:2]
            i, j = schedule.grouped(self, self.block_ids[0], rows, cols, GROUP_M, tir.I32)
            self.block_ids = (i, j, self.block_ids[2])

    def _fact(self, value, div: int):
        value = self.b.assume_bounded(value, 0, None)
        return self.b.assume_div_by(value, div) if div > 1 else value

    def partition(self, tensor, shape, padding: float | None = None):
        """The partition view of ``tensor`` in tiles of ``shape`` that pads with ``padding``
        (a load's attr: None for zero, or -0.0, nan, inf, -inf)."""
        view = self.views[id(tensor)]
        key = (tuple(shape), _padding_name(padding))
        if key not in view.parts:
            view.parts[key] = self.b.make_partition_view(view.view, key[0], padding=key[1])
        return view.parts[key]

    # regions and slots ------------------------------------------------------------------------

    def region(self, region: Region, tail: bool = False) -> None:
        """Lower the ops of ``region``. ``tail``: nothing follows it up to the end of the kernel
        or inlined function, so a return that ends it only falls through."""
        ops = region.ops
        for k, op in enumerate(ops):
            self.tail = tail and k == len(ops) - 1  # of this op (an if passes it on)
            if op.name == Op.CF_RETURN and self.tail:
                return
            rule = RULES.get(op.name)
            if rule is None:  # passes/tile_subset.py refuses these, before any backend
                raise InternalError(f"tile lowering: {op.name} has no Tile IR rule "
                                    f"({UNSUPPORTED.get(op.name, 'and no reason')}), but the "
                                    f"tile passes let it through")
            rule(self, op)

    def writes(self, op) -> list:
        """The keys of the slots that ``op`` itself changes: a local slot, or the memory tokens
        of the Out tensor it loads or stores."""
        if op.name == Op.LOCAL_STORE:
            return [id(op.operands[0])]
        if op.name == Op.TILE_PARTIAL_STORE and schedule.PIECE_STORES in self.slots:
            return [schedule.PIECE_STORES]
        if op.name in _MEMORY and op.attrs.get("order") is not None:
            tensor = id(op.operands[0])
            return [(_LAST_OP, tensor)] + ([(_LAST_STORE, tensor)] if op.name in _WRITES
                                           else [])
        return []


def _elementwise(float_op, int_op, bool_op=None):
    def rule(low: Lowering, op):
        a, b = (low.v(x) for x in op.operands)
        d = op.operands[0].type.dtype
        b_ = low.b
        if d.is_bool and bool_op:
            low.set(op, getattr(b_, bool_op)(a, b))
        elif d.is_float:
            if float_op is None:  # the op's verifier refuses this
                raise InternalError(f"tile lowering: {op.name} of floats")
            low.set(op, getattr(b_, float_op)(a, b))
        else:
            if int_op is None:
                raise InternalError(f"tile lowering: {op.name} of integers")
            name, signed = int_op
            if signed:
                low.set(op, getattr(b_, name)(a, b, signedness="signed" if d.is_signed
                                              else "unsigned"))
            else:
                low.set(op, getattr(b_, name)(a, b))
    return rule


def _min(low: Lowering, op):
    """Float min as the max of the negations (exact: zeros, NaN): tileiras, through ptxas,
    turns minf(x, 1.0) then maxf(_, 0.0) into one .SAT instruction, which gives 0 for a NaN x
    where minf gives 1 (the SIMT twin of fuzz seed 58110)."""
    if not op.operands[0].type.dtype.is_float:
        _elementwise(None, ("mini", True))(low, op)
        return
    a, b = (low.b.negf(low.v(x)) for x in op.operands)
    low.set(op, low.b.negf(low.b.maxf(a, b)))


def _shape(op) -> tuple:
    t = op.results[0].type
    return t.shape if isinstance(t, T.Tile) else ()


def _floordiv(low: Lowering, op):
    if op.operands[0].type.dtype.is_float:
        _float_divmod(low, op, want_mod=False)
    else:
        _int_divmod(low, op, want_mod=False)


def _mod(low: Lowering, op):
    if op.operands[0].type.dtype.is_float:
        _float_divmod(low, op, want_mod=True)
    else:
        _int_divmod(low, op, want_mod=True)


def _int_divmod(low: Lowering, op, want_mod: bool):
    """Integer ``//`` or ``%`` with Python's floor, defined where Tile IR's divi/remi are not
    (docs/semantics.md): a zero divisor gives 0, INT_MIN // -1 wraps to INT_MIN, INT_MIN % -1
    is 0. The divisor is replaced by 1 in those lanes, and their result chosen afterwards."""
    a, b = (low.v(x) for x in op.operands)
    d, bb, shape = op.operands[0].type.dtype, low.b, _shape(op)
    e, sign = elem(d), "signed" if d.is_signed else "unsigned"
    zero, one = low.const(0, e, shape), low.const(1, e, shape)
    is_zero = bb.cmpi("eq", b, zero, signedness=sign)
    bad, minus_one = is_zero, None
    if d.is_signed:
        minus_one = bb.cmpi("eq", b, low.const(-1, e, shape))
        bad = bb.ori(is_zero, minus_one)
    safe = bb.select(bad, one, b)
    if want_mod:
        r = bb.remi(a, safe, signedness=sign)
        if d.is_signed:  # truncated -> floored: add the divisor where the signs differ
            fix = bb.andi(bb.cmpi("ne", r, zero),
                          bb.xori(bb.cmpi("lt", r, zero), bb.cmpi("lt", safe, zero)))
            r = bb.select(fix, bb.addi(r, safe), r)
        low.set(op, bb.select(bad, zero, r))
        return
    q = bb.divi(a, safe, signedness=sign, rounding="negative_inf" if d.is_signed else "zero")
    if d.is_signed:
        q = bb.select(minus_one, bb.negi(a), q)
    low.set(op, bb.select(is_zero, zero, q))


def _float_divmod(low: Lowering, op, want_mod: bool):
    """Python's float ``//`` or ``%`` (CPython's float_divmod, which NumPy follows; the SIMT
    lowering builds the same): remf is the exact fmod. A zero divisor gives a / b for ``//``
    and NaN for ``%``; f16/bf16 work in f32 and round once."""
    a, b = (low.v(x) for x in op.operands)
    d, bb, shape = op.operands[0].type.dtype, low.b, _shape(op)
    work = tir.F32 if d.bits == 16 else elem(d)
    if d.bits == 16:
        a, b = bb.ftof(a, work), bb.ftof(b, work)
    zero, one = low.const(0.0, work, shape), low.const(1.0, work, shape)
    mod = bb.remf(a, b)
    div = bb.divf(bb.subf(a, mod), b)
    adjust = bb.andi(bb.cmpf("ne", mod, zero, ordering="unordered"),
                     bb.xori(bb.cmpf("lt", b, zero), bb.cmpf("lt", mod, zero)))
    if want_mod:
        mod = bb.select(adjust, bb.addf(mod, b), mod)
        out = bb.select(bb.cmpf("eq", mod, zero), _signed_zero(low, b, shape), mod)
    else:
        div = bb.select(adjust, bb.subf(div, one), div)
        floor = bb.floor(div)
        snap = bb.cmpf("gt", bb.subf(div, floor), low.const(0.5, work, shape))
        floor = bb.select(snap, bb.addf(floor, one), floor)
        quotient = bb.divf(a, b)
        out = bb.select(bb.cmpf("ne", div, zero, ordering="unordered"), floor,
                        _signed_zero(low, quotient, shape))
        out = bb.select(bb.cmpf("eq", b, zero), quotient, out)
    low.set(op, bb.ftof(out, elem(d)) if d.bits == 16 else out)


def _signed_zero(low: Lowering, x, shape):
    """copysign(0, x): the sign bit of ``x`` alone."""
    ft = x.type.elem
    it = {32: tir.I32, 64: tir.I64}[ft.bits]
    sign = low.b.andi(low.b.bitcast(x, it), low.const(1 << (ft.bits - 1), it, shape))
    return low.b.bitcast(sign, ft)


def _shift(left: bool):
    def rule(low: Lowering, op):
        """Shifts by the width or more (a negative amount is a huge unsigned one) give 0, or
        the sign for a signed right shift; Tile IR leaves them undefined."""
        a, n = (low.v(x) for x in op.operands)
        d, bb, shape = op.operands[0].type.dtype, low.b, _shape(op)
        e = elem(d)
        zero = low.const(0, e, shape)
        big = bb.cmpi("ge", n, low.const(d.bits, e, shape), signedness="unsigned")
        # the amount saturated, not only the result selected (the SIMT lowering's reason: an
        # LLVM-based compiler may drop the select and truncate a 64-bit amount; seed 43933)
        safe = bb.select(big, low.const(d.bits - 1, e, shape), n)
        if not left and d.is_signed:
            low.set(op, bb.shri(a, safe, signedness="signed"))
            return
        shifted = bb.shli(a, safe) if left else bb.shri(a, safe, signedness="unsigned")
        low.set(op, bb.select(big, zero, shifted))
    return rule


def _unary(low: Lowering, op):
    (a,) = (low.v(x) for x in op.operands)
    d = op.operands[0].type.dtype
    kind = op.name.split(".")[1]
    shape = getattr(op.results[0].type, "shape", ())
    if kind == "neg":
        low.set(op, low.b.negf(a) if d.is_float else low.b.negi(a))
    elif kind == "abs":
        low.set(op, low.b.absf(a) if d.is_float else (low.b.absi(a) if d.is_signed else a))
    else:  # not: bitwise for integers, logical for bool
        low.set(op, low.b.xori(a, low.const(1 if d.is_bool else -1, elem(d), shape)))


_PRED = {"eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge"}


def _cmp(low: Lowering, op):
    a, b = (low.v(x) for x in op.operands)
    d, pred = op.operands[0].type.dtype, op.attrs["pred"]
    if d.is_float:
        # Python: NaN != x is True, every other comparison with NaN is False
        low.set(op, low.b.cmpf(pred, a, b, ordering="unordered" if pred == "ne" else "ordered"))
    else:
        low.set(op, low.b.cmpi(pred, a, b,
                               signedness="signed" if d.is_signed else "unsigned"))


def _cast(low: Lowering, op):
    """Conversions by dtypes.convert's rules (docs/semantics.md)."""
    a = low.v(op.operands[0])
    src, dst = op.operands[0].type.dtype, op.results[0].type.dtype
    to, bb, shape = elem(dst), low.b, _shape(op)
    if dst.is_bool and not src.is_bool:  # x != 0, NaN included
        zero = low.const(0, elem(src), shape)
        low.set(op, bb.cmpf("ne", a, zero, ordering="unordered") if src.is_float
                else bb.cmpi("ne", a, zero))
    elif elem(src) == to:
        low.set(op, a)
    elif src.is_float and dst.is_float:
        low.set(op, bb.ftof(a, to))
    elif dst.is_float and dst.name == "bf16" and src.bits > 24:
        low.set(op, _wide_int_to_bf16(low, a, src, shape))
    elif dst.is_float:
        low.set(op, bb.itof(a, to, signedness="signed" if src.is_signed else "unsigned"))
    elif src.is_float:
        low.set(op, _float_to_int(low, a, src, dst, shape))
    elif dst.bits > src.bits or src.is_bool:
        low.set(op, bb.exti(a, to, signedness="signed" if src.is_signed else "unsigned"))
    else:
        low.set(op, bb.trunci(a, to))


def _float_to_int(low: Lowering, a, src: DType, dst: DType, shape):
    """Truncate toward zero, saturate, NaN -> 0. Tile IR's ftoi is undefined for NaN, infinities
    and out-of-range values, so those lanes convert 0 and take their result from a select."""
    bb, to = low.b, elem(dst)
    lo, hi = int_range(dst)
    # the limits rounded to the source type: where hi is not exact it rounds up, past the range
    above = bb.cmpf("ge", a, low.const(float(hi), elem(src), shape))
    below = bb.cmpf("le", a, low.const(float(lo), elem(src), shape))
    nan = bb.cmpf("ne", a, a, ordering="unordered")
    outside = bb.ori(bb.ori(above, below), nan)
    safe = bb.select(outside, low.const(0.0, elem(src), shape), a)
    r = bb.ftoi(safe, to, signedness="signed" if dst.is_signed else "unsigned")
    r = bb.select(below, low.const(lo, to, shape), r)
    return bb.select(above, low.const(hi, to, shape), r)


def _wide_int_to_bf16(low: Lowering, a, src: DType, shape):
    """An integer of more than 24 bits as bf16, rounded once (itof rounds through f32 on sm_80,
    twice): the magnitude rounded to odd at 24 bits converts to f32 exactly, and f32 -> bf16
    then rounds correctly (dtypes.py). Tile IR has no count-leading-zeros: the bit length comes
    from the exponent of the magnitude as f64 (one more when that rounded up: still exact)."""
    bb, i64 = low.b, tir.I64

    def c(n):
        return low.const(n, i64, shape)
    x = a if src.bits == 64 else bb.exti(a, i64, signedness="signed" if src.is_signed
                                           else "unsigned")
    negative = bb.cmpi("lt", x, c(0)) if src.is_signed else None
    mag = bb.select(negative, bb.negi(x), x) if src.is_signed else x
    wide = bb.bitcast(bb.itof(mag, tir.F64, signedness="unsigned"), i64)
    exponent = bb.subi(bb.andi(bb.shri(wide, c(52), signedness="unsigned"), c(0x7FF)), c(1023))
    shift = bb.maxi(bb.subi(exponent, c(23)), c(0))  # bit length - 24
    mask = bb.subi(bb.shli(c(1), shift), c(1))
    sticky = bb.exti(bb.cmpi("ne", bb.andi(mag, mask), c(0)), i64, signedness="unsigned")
    kept = bb.ori(bb.andi(mag, bb.xori(mask, c(-1))), bb.shli(sticky, shift))
    f = bb.itof(kept, tir.F32, signedness="unsigned")
    if src.is_signed:
        f = bb.select(negative, bb.negf(f), f)
    return bb.ftof(f, tir.BF16)


def _constant(low: Lowering, op):
    t = op.results[0].type
    low.set(op, low.b.constant(op.attrs["value"], tile_type(t)))


# math op -> the Tile IR operation (the Builder's method) that computes it
_MATH = {Op.EXP: "exp", Op.EXP2: "exp2", Op.LOG: "log", Op.LOG2: "log2", Op.SQRT: "sqrt",
         Op.RSQRT: "rsqrt", Op.TANH: "tanh", Op.SIN: "sin", Op.COS: "cos", Op.TAN: "tan",
         Op.FLOOR: "floor", Op.CEIL: "ceil", Op.FABS: "absf", Op.POW: "pow"}


def _math(name):
    def rule(low: Lowering, op):
        args = [low.v(x) for x in op.operands]
        d = op.operands[0].type.dtype
        fn = getattr(low.b, name)
        if op.attrs.get("flush_to_zero"):   # ft.exp2(x, flush_to_zero=True): computed in f32
            fn = functools.partial(fn, flush_to_zero=True)
        if d.bits == 16:  # computed in f32 and rounded once, as on the SIMT track
            wide = [low.b.ftof(a, tir.F32) for a in args]
            low.set(op, low.b.ftof(fn(*wide), elem(d)))
        else:
            low.set(op, fn(*args))
    return rule


# tile ops ---------------------------------------------------------------------------------------

def _index_i32(low: Lowering, value):
    v = low.v(value)
    source = low.narrow.get(id(v))
    return source if source is not None else low.b.trunci(v, tir.I32)


def _block_index(low: Lowering, op):
    wide = low.b.exti(low.block_ids[op.attrs["axis"]], tir.I64, signedness="unsigned")
    low.narrow[id(wide)] = low.block_ids[op.attrs["axis"]]
    low.set(op, wide)


def _num_blocks(low: Lowering, op):
    counts = low.b.get_num_tile_blocks()
    low.set(op, low.b.exti(counts[op.attrs["axis"]], tir.I64, signedness="unsigned"))


def _dim(low: Lowering, op):
    dim = low.views[id(op.operands[0])].dims[op.attrs["axis"]]
    wide = low.b.exti(dim, tir.I64, signedness="unsigned")
    low.narrow[id(wide)] = dim
    low.set(op, wide)


_PADDINGS = {"zero": 0.0, "pos_inf": math.inf, "neg_inf": -math.inf}


def _padding_name(value: float | None) -> str:
    """Tile IR's name of a partition view's padding value (docs: padding_value)."""
    if value is None or (value == 0 and math.copysign(1.0, value) > 0):
        return "zero"
    if math.isnan(value):
        return "nan"
    if value == 0:
        return "neg_zero"
    return next(name for name, v in _PADDINGS.items() if v == value)


def _ordered_load(low: Lowering, op, view, index, hints=None):
    """Load ``view[index]`` for ``op`` (a load of its first operand), in the order the
    memory_order pass gave it (memory.ordered); returns the tile."""
    if op.attrs.get("order") not in (None, Order.AFTER_STORES):
        raise InternalError(f"tile lowering: a load ordered {op.attrs['order']!r}")
    return memory.ordered(low, op, lambda token: low.b.load_view_tko(view, index, token=token,
                                                                      hints=hints))


def _memory_hints(low: Lowering, op) -> dict | None:
    """The optimisation hints of a view load or store, keyed by arch: the kernel's
    (``latency``, ``allow_tma``), with ``allow_tma`` False when the kernel is compiled
    without TMA (``FEARLESS_TMA=0``)."""
    hints = dict(op.attrs.get("hints") or {})
    if not low.tma:
        hints["allow_tma"] = False
    return {low.arch or "default": hints} if hints else None


def _load(low: Lowering, op):
    tensor, *coords = op.operands
    pv = low.partition(tensor, op.attrs["shape"], op.attrs.get("padding"))
    index = [_index_i32(low, c) for c in coords]
    low.set(op, _ordered_load(low, op, pv, index, _memory_hints(low, op)))


def _own_index(low: Lowering, ty: T.TensorView):
    return list(low.block_ids[:ty.ndim])


def _load_own(low: Lowering, op):
    (out,) = op.operands
    pv = low.partition(out, out.type.tile_shape)
    low.set(op, _ordered_load(low, op, pv, _own_index(low, out.type), _memory_hints(low, op)))


def _store(low: Lowering, op):
    out, value = op.operands
    if op.attrs.get("order") is not Order.AFTER_ALL:
        raise InternalError("tile lowering: a store the memory_order pass did not order")
    pv = low.partition(out, out.type.tile_shape)
    hints = _memory_hints(low, op)
    memory.ordered(low, op, lambda token: (None, low.b.store_view_tko(
        low.v(value), pv, _own_index(low, out.type), token=token, hints=hints)))


def _splat(low: Lowering, op):
    shape = op.results[0].type.shape
    v = low.b.reshape(low.v(op.operands[0]), (1,) * len(shape))
    low.set(op, low.b.broadcast(v, shape))


# -0.0 for a float sum: +0.0 would turn a sum of -0.0s into +0.0 (x + -0.0 == x for every x).
# NaN for a float max or min: maxf/minf ignore a NaN operand, so NaN is their identity, where
# -inf/+inf turned a row of NaNs into -inf/+inf (tileiras starts its cross-warp step, atomics on
# order-preserving integer keys, from the identity and ranks NaNs below it: fuzz seed 29398)
_IDENTITY = {"sum": -0.0, "max": math.nan, "min": math.nan}


def _identity(kind: str, d: DType):
    if d.is_float:
        return _IDENTITY[kind]
    if kind == "sum":
        return 0
    lo, hi = (-(1 << (d.bits - 1)), (1 << (d.bits - 1)) - 1) if d.is_signed else \
        (0, (1 << d.bits) - 1)
    return lo if kind == "max" else hi


def _reduce(low: Lowering, op):
    kind, axis = op.attrs["kind"], op.attrs["axis"]
    d = op.operands[0].type.dtype
    bb = low.b
    sign = "signed" if d.is_signed else "unsigned"
    combine = {("sum", True): bb.addf, ("max", True): bb.maxf, ("min", True): bb.minf,
               ("sum", False): bb.addi,
               ("max", False): lambda x, y: bb.maxi(x, y, signedness=sign),
               ("min", False): lambda x, y: bb.mini(x, y, signedness=sign)}[(kind, d.is_float)]

    def body(x, acc):
        bb.yield_([combine(x, acc)])
    (result,) = bb.reduce([low.v(op.operands[0])], axis, [_identity(kind, d)], body)
    low.set(op, result)


def _argmax(low: Lowering, op):
    """The first index of the largest value; of floats, NaN ranks below every number (the index
    of ``ft.max``'s value, which ignores NaN), and an all-NaN line gives its first index."""
    axis = op.attrs["axis"]
    x = low.v(op.operands[0])
    shape = op.operands[0].type.shape
    d = op.operands[0].type.dtype
    bb = low.b
    iota = bb.iota(tir.tile(tir.I32, (shape[axis],)))
    line = tuple(shape[axis] if k == axis else 1 for k in range(len(shape)))
    index = bb.broadcast(bb.reshape(iota, line), shape)
    sign = "signed" if d.is_signed else "unsigned"  # u8 253 > 0 (fuzz seed 35858)

    def order(v, acc_v):  # (v ranks above acc_v, v ranks the same)
        if not d.is_float:
            return (bb.cmpi("gt", v, acc_v, signedness=sign),
                    bb.cmpi("eq", v, acc_v, signedness=sign))
        v_nan, acc_nan = (bb.cmpf("ne", y, y, ordering="unordered") for y in (v, acc_v))
        v_number = bb.cmpf("eq", v, v)
        return (bb.ori(bb.cmpf("gt", v, acc_v), bb.andi(acc_nan, v_number)),
                bb.ori(bb.cmpf("eq", v, acc_v), bb.andi(v_nan, acc_nan)))

    def body(v, acc_v, i, acc_i):
        better, same = order(v, acc_v)
        take = bb.ori(better, bb.andi(same, bb.cmpi("lt", i, acc_i)))
        bb.yield_([bb.select(take, v, acc_v), bb.select(take, i, acc_i)])
    start = math.nan if d.is_float else _identity("max", d)  # ranks below every value
    _, where = bb.reduce([x, index], axis, [start, (1 << 31) - 1], body)
    low.set(op, where)


def _mma(low: Lowering, op):
    a, b, acc = (low.v(x) for x in op.operands)
    if op.operands[0].type.dtype.name == "f32":  # f32 inputs run on TF32 tensor cores
        a, b = low.b.ftof(a, tir.TF32), low.b.ftof(b, tir.TF32)
    low.set(op, low.b.mmaf(a, b, acc))


# control flow and slots -------------------------------------------------------------------------

def _local_alloc(low: Lowering, op):
    t = op.results[0].type.elem
    low.slots[id(op.results[0])] = low.b.constant(0, tile_type(t))


def _local_load(low: Lowering, op):
    low.set(op, low.slots[id(op.operands[0])])


def _local_store(low: Lowering, op):
    low.slots[id(op.operands[0])] = low.v(op.operands[1])


RULES = {
    Op.ADD: _elementwise("addf", ("addi", False)),
    Op.SUB: _elementwise("subf", ("subi", False)),
    Op.MUL: _elementwise("mulf", ("muli", False)),
    Op.DIV: _elementwise("divf", None),
    Op.FLOORDIV: _floordiv,
    Op.MOD: _mod,
    Op.MIN: _min,
    Op.MAX: _elementwise("maxf", ("maxi", True)),
    Op.AND: _elementwise(None, ("andi", False), "andi"),
    Op.OR: _elementwise(None, ("ori", False), "ori"),
    Op.XOR: _elementwise(None, ("xori", False), "xori"),
    Op.SHL: _shift(True),
    Op.SHR: _shift(False),
    Op.NEG: _unary, Op.ABS: _unary, Op.NOT: _unary,
    Op.CMP: _cmp,
    Op.CAST: _cast,
    Op.CONSTANT: _constant,
    Op.SELECT: lambda low, op: low.set(op, low.b.select(*(low.v(x) for x in op.operands))),
    **{op: _math(method) for op, method in _MATH.items()},
    **mathlib.RULES,
    **special.RULES,
    Op.TILE_BLOCK_INDEX: _block_index,
    Op.TILE_NUM_BLOCKS: _num_blocks,
    **schedule.RULES,
    Op.TILE_DIM: _dim,
    Op.TILE_LOAD: _load,
    Op.TILE_LOAD_OWN: _load_own,
    Op.TILE_STORE: _store,
    Op.TILE_SPLAT: _splat,
    Op.TILE_BROADCAST: lambda low, op: low.set(op, low.b.broadcast(low.v(op.operands[0]),
                                                                 op.results[0].type.shape)),
    Op.TILE_RESHAPE: lambda low, op: low.set(op, low.b.reshape(low.v(op.operands[0]),
                                                             op.results[0].type.shape)),
    Op.TILE_PERMUTE: lambda low, op: low.set(op, low.b.permute(low.v(op.operands[0]),
                                                             op.attrs["perm"])),
    Op.TILE_REDUCE: _reduce,
    Op.TILE_ARGMAX: _argmax,
    Op.TILE_IOTA: lambda low, op: low.set(op, low.b.iota(tile_type(op.results[0].type))),
    Op.TILE_MMA: _mma,
    **memory.RULES,
    **stream_k.RULES,
    Op.LOCAL_ALLOC: _local_alloc,
    Op.LOCAL_LOAD: _local_load,
    Op.LOCAL_STORE: _local_store,
    **control.RULES,
}

def uses_pdl(version: tuple[int, int], arch: str | None) -> bool:
    """Whether a kernel lowered for ``version`` and ``arch`` starts with the grid dependency
    control of programmatic dependent launch (``griddepcontrol``: sm_90 and later, bytecode
    13.4 and later). Such a kernel signals its dependents at once and then waits for the grids
    it depends on before its first memory access, so launching it with the driver's
    programmatic stream serialization lets it be scheduled, and run everything up to that
    access, while the kernel before it finishes; without a dependency the wait returns at
    once."""
    return arch is not None and version >= (13, 4) and sm_number(arch) >= 90


def lower_tile(fn: Function, version: tuple[int, int], hints: dict | None = None,
               arch: str | None = None, tma: bool = True) -> bytes:
    """Tile IR bytecode of tile kernel ``fn`` for bytecode ``version`` (e.g. (13, 4)).

    ``hints``: Tile IR entry hints per arch, e.g. ``{"sm_90": {"occupancy": 1}}``; ``arch``
    (e.g. "sm_90") keys the load hints a kernel gives (``latency``, ``allow_tma``); ``tma``
    False makes every view load and store ``allow_tma=False``.
    ``fn`` has been through ``passes.TILE_PASSES``, which refuse what Tile IR cannot express
    (CompileError); here only the writer may refuse an op the bytecode ``version`` lacks.
    """
    low = _lower(fn, version, hints, arch, False, tma)
    if _has_f64_trig(low.entry.body):
        low = _lower(fn, version, hints, arch, True, tma)
    return low.module.encode()


# tileiras 13.4 and 13.5 fail for sm_90 ("failed to compile Tile IR program") on kernels that
# take sin/cos/tan in f64 (lgamma's recipe too) and access memory it may vectorise: tensors
# 16-byte aligned with extents the vector divides (fuzz class tileiras-f64-trig-if; bisected on
# seeds 269, 1690 and 634: an output's alignment or inner-extent divisibility alone decides it
# when it is stored under an `if`; seed 32022: the f64 inputs of an mma, and 8-byte vectors).
# Such kernels state every tensor's pointer as aligned to one element only: no vector access.
_TRIG = ("sin", "cos", "tan")


def _has_f64_trig(block: tir.Block) -> bool:
    for op in block.ops:
        if op.name in _TRIG and op.result.elem == tir.F64:
            return True
        if any(_has_f64_trig(region) for region in op.regions):
            return True
    return False


def _lower(fn: Function, version, hints, arch, scalar_access: bool, tma: bool) -> Lowering:
    low = Lowering(fn, version, hints, arch, scalar_access, tma)
    low.prologue()
    control.enter_kernel(low, fn.body)
    low.region(fn.body, tail=True)
    if not control.terminated(low):
        low.b.return_()
    return low
