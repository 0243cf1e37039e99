"""Builder: one method per Tile IR op, appending typed ops to a block and returning their results.

Job: the API the tile-IR lowering calls. Each method checks operand types, infers the result
type, records the op with its attributes under the field names of its ``ops.py`` row, and
returns the result Value (or a tuple of them). Enum arguments take the enum or its name
(``rounding="zero"``). Version checks happen at encode time, where the version is known.

Regions (``for_``, ``loop``, ``if_``, ``reduce``, ``scan``) come in two forms:
  * callback:  ``res = b.for_(lb, ub, step, [acc0], body=lambda iv, args: b.continue_([...]))``
  * context:   ``with b.for_(lb, ub, step, [acc0]) as loop: ...; b.continue_([...])`` then
               ``loop.results``; inside the ``with`` the same builder appends to the body.
    ``if_``: ``br = b.if_(cond, types)``, ``with br.then_(): ... b.yield_(...)``, ``with
    br.else_(): ...``, ``br.results``; an absent ``else`` of a result-less if holds just ``yield``.
    ``reduce``/``scan`` take ``body(*args)``; args are (elem_i, acc_i) 0-d pairs per operand.
A region must end with its terminator (``continue_``, ``break_``, ``yield_``, ``return_``); a
missing one raises when the region closes and again at encode.

Source of facts for result typing: NVIDIA/cuda-tile ``Ops.td`` (type constraints per op).
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Self

from fearless.backends.tileir.bytecode import float_bits
from fearless.backends.tileir.ops import REGION_TERMINATORS, SPECS, TERMINATORS
from fearless.backends.tileir.pointers import PointerOps
from fearless.backends.tileir.tir import (
    I1,
    I32,
    TOKEN,
    Block,
    Bounded,
    CmpPred,
    DivBy,
    MemOrder,
    MemScope,
    Op,
    Ordering,
    Overflow,
    PartitionViewType,
    PtrType,
    Rounding,
    SameElements,
    Scalar,
    ScalarType,
    Signedness,
    TensorViewType,
    TileType,
    Value,
    coerce_enum,
    normalize_hints,
    partition_view,
    tile,
)


def pack_constant(value, ty: TileType) -> bytes:
    """Little-endian element bytes of a constant of tile type `ty`; one element = a splat."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    elem = ty.elem
    if not isinstance(elem, ScalarType):
        raise TypeError(f"constants are numbers, not {elem!r}")
    flat = list(_flatten(value))
    n = math.prod(ty.shape)
    if len(flat) not in (1, n):
        raise ValueError(f"constant has {len(flat)} elements, {ty!r} needs 1 (splat) or {n}")
    if elem is I1:
        return _pack_bools(flat, n)
    width = max(1, elem.bits // 8)
    out = bytearray()
    for x in flat:
        if elem.kind == "float":
            bits = float_bits(float(x), 32 if elem.name == "tf32" else elem.bits,
                              bfloat=elem.name == "bf16")
            out += bits.to_bytes(width, "little")
        else:
            x = int(x)
            if not -(1 << (elem.bits - 1)) <= x < (1 << elem.bits):
                raise ValueError(f"constant {x} does not fit {elem!r}")
            out += (x & ((1 << (8 * width)) - 1)).to_bytes(width, "little")
    return bytes(out)


def _pack_bools(flat: list, n: int) -> bytes:
    """i1 constants as MLIR's dense elements store them: one bit per element, element k at bit
    k % 8 of byte k // 8; a splat is the single byte 0x00 or 0xFF. (A splat written as 0x01
    reads back as [true, false, ...] wherever the tile has at most 8 elements: tileiras took
    ``ft.full((2, 1), True)`` for [[true], [false]].)"""
    bits = [bool(x) for x in flat]
    if len(set(bits)) == 1:
        return b"\xff" if bits[0] else b"\x00"
    out = bytearray((n + 7) // 8)
    for k, b in enumerate(bits):
        out[k // 8] |= b << (k % 8)
    return bytes(out)


def _flatten(v):
    if isinstance(v, (list, tuple)):
        for x in v:
            yield from _flatten(x)
    else:
        yield v


def _tile(v: Value, what: str) -> TileType:
    if not isinstance(v, Value) or not isinstance(v.type, TileType):
        raise TypeError(f"{what} must be a tile value, got {v!r}")
    return v.type


def _same(op: str, *vals: Value) -> TileType:
    t = _tile(vals[0], f"{op} operand")
    for v in vals[1:]:
        if _tile(v, f"{op} operand") != t:
            raise TypeError(f"{op}: operand types differ: {t!r} vs {v.type!r}")
    return t


def _kind(op: str, t: TileType, kind: str) -> None:
    if not isinstance(t.elem, ScalarType) or t.elem.kind != kind:
        raise TypeError(f"{op} needs {kind} tiles, got {t!r}")


def _elem_of(x) -> ScalarType:
    return x.elem if isinstance(x, TileType) else x


class Region:
    """Handle of a region op built in context-manager form; ``results`` once closed."""

    def __init__(self, builder: Builder, op: Op):
        self.b, self.op = builder, op

    @property
    def results(self) -> tuple[Value, ...]:
        return self.op.results

    @property
    def args(self) -> list[Value]:
        return self.op.regions[0].args


class ForLoop(Region):
    @property
    def iv(self) -> Value:
        return self.op.regions[0].args[0]

    @property
    def args(self) -> list[Value]:
        return self.op.regions[0].args[1:]

    def __enter__(self) -> Self:
        self.b._push(self.op.regions[0])
        return self

    def __exit__(self, exc_type, *_):
        self.b._pop(self.op, 0, check=exc_type is None)


class LoopRegion(Region):
    def __enter__(self) -> Self:
        self.b._push(self.op.regions[0])
        return self

    def __exit__(self, exc_type, *_):
        self.b._pop(self.op, 0, check=exc_type is None)


class IfRegion(Region):
    implicit_yield: Op | None = None

    @contextmanager
    def then_(self):
        self.b._push(self.op.regions[0])
        ok = False
        try:
            yield
            ok = True
        finally:
            self.b._pop(self.op, 0, check=ok)

    @contextmanager
    def else_(self):
        block = self.op.regions[1]
        if len(block.ops) == 1 and block.ops[0] is self.implicit_yield:
            block.ops.clear()  # replace the implicit empty yield of a result-less if
        self.b._push(block)
        ok = False
        try:
            yield
            ok = True
        finally:
            self.b._pop(self.op, 1, check=ok)


class Builder(PointerOps):
    """Appends ops to a block (a function body at first; region bodies while inside them).
    The pointer-tile ops (``offset``, ``load_ptr_tko``, ``store_ptr_tko``, the atomics) come
    from ``pointers.PointerOps``."""

    def __init__(self, block: Block):
        self._stack = [block]

    @property
    def block(self) -> Block:
        return self._stack[-1]

    # --- plumbing ------------------------------------------------------------------------

    def _emit(self, name: str, result_types, regions=(), **fields) -> Op:
        blk = self.block
        if blk.ops and blk.ops[-1].name in TERMINATORS:
            raise ValueError(f"{name} after the terminator {blk.ops[-1].name} of its block")
        spec = SPECS[name]
        order = [f.name for f in spec.fields if f.name] + list(spec.unit_names)
        unknown = set(fields) - set(order)
        if unknown:
            raise TypeError(f"{name}: unknown fields {sorted(unknown)}")
        op = Op(name, (), {k: fields.get(k) for k in order if k in fields}, list(regions))
        op.results = tuple(Value(t, op, i) for i, t in enumerate(result_types))
        blk.ops.append(op)
        return op

    def _one(self, name, ty, **fields) -> Value:
        return self._emit(name, [ty], **fields).results[0]

    def _push(self, block: Block) -> None:
        self._stack.append(block)

    def _pop(self, op: Op, index: int, check: bool) -> None:
        block = self._stack.pop()
        if check:
            check_terminated(op, index, block)

    # --- tokens, views, block ids, memory -----------------------------------------------------

    def make_token(self) -> Value:
        return self._one("make_token", TOKEN)

    def gdc_launch_dependents(self) -> Value:
        """Let the grids that depend on this one programmatically launch (PTX
        ``griddepcontrol.launch_dependents``); their ``gdc_wait`` still waits for this grid."""
        return self._one("gdc_launch_dependents", TOKEN, token=None)

    def gdc_wait(self) -> Value:
        """Wait until the grids this one depends on have completed and their memory is visible
        (PTX ``griddepcontrol.wait``; returns at once without such a dependency). The token:
        memory operations that take it follow the wait."""
        return self._one("gdc_wait", TOKEN, token=None)

    def join_tokens(self, tokens) -> Value:
        tokens = tuple(tokens)
        if any(t.type != TOKEN for t in tokens):
            raise TypeError("join_tokens takes tokens")
        return self._one("join_tokens", TOKEN, tokens=tokens)

    def make_tensor_view(self, base: Value, type: TensorViewType, shape=(), strides=()) -> Value:
        """`shape`/`strides`: one 0-d integer tile per dynamic (None) entry of `type`, in order."""
        bt = _tile(base, "make_tensor_view base")
        if bt.shape or not isinstance(bt.elem, PtrType) or bt.elem.elem != type.elem:
            raise TypeError(f"make_tensor_view base must be tile<ptr<{type.elem!r}>>, got {bt!r}")
        shape, strides = tuple(shape), tuple(strides)
        for got, want, what in ((shape, type.shape, "shape"), (strides, type.strides, "strides")):
            if len(got) != sum(d is None for d in want):
                raise ValueError(f"make_tensor_view: {len(got)} dynamic {what} values for "
                                 f"{type!r}")
            for v in got:
                t = _tile(v, f"dynamic {what}")
                if t.shape or t.elem.kind != "int":
                    raise TypeError(f"dynamic {what} must be 0-d integer tiles, got {t!r}")
        return self._one("make_tensor_view", type, base=base, shape=shape, strides=strides)

    def make_partition_view(self, view: Value, tile_shape_or_type, dim_map=None,
                            padding: str | None = None) -> Value:
        if not isinstance(view.type, TensorViewType):
            raise TypeError(f"make_partition_view takes a tensor_view, got {view.type!r}")
        t = tile_shape_or_type
        if not isinstance(t, PartitionViewType):
            t = partition_view(t, view.type, dim_map, padding)
        if t.tensor_view != view.type or len(t.tile_shape) != len(view.type.shape):
            raise TypeError(f"partition view {t!r} does not fit {view.type!r}")
        return self._one("make_partition_view", t, source=view)

    def get_tile_block_id(self) -> tuple[Value, Value, Value]:
        return self._emit("get_tile_block_id", [tile(I32)] * 3).results

    def get_num_tile_blocks(self) -> tuple[Value, Value, Value]:
        return self._emit("get_num_tile_blocks", [tile(I32)] * 3).results

    def get_index_space_shape(self, view: Value, elem: ScalarType = I32) -> tuple[Value, ...]:
        if not isinstance(view.type, PartitionViewType):
            raise TypeError(f"get_index_space_shape takes a partition view, got {view.type!r}")
        n = len(view.type.tile_shape)
        return self._emit("get_index_space_shape", [tile(elem)] * n, view=view).results

    def _mem(self, view, index, token, ordering, scope, hints, inbounds):
        if not isinstance(view.type, PartitionViewType):
            raise TypeError(f"view must be a partition view, got {view.type!r}")
        index = tuple(index)
        if len(index) != len(view.type.tile_shape):
            raise ValueError(f"{len(index)} indices for a rank-{len(view.type.tile_shape)} view")
        for v in index:
            if _tile(v, "index").shape or v.type.elem.kind != "int":
                raise TypeError(f"indices are 0-d integer tiles, got {v.type!r}")
        if token is not None and token.type != TOKEN:
            raise TypeError("token must be a token value")
        if inbounds is not None:
            inbounds = tuple(bool(x) for x in inbounds)
            if len(inbounds) != len(index):
                raise ValueError("inbounds needs one flag per index")
            inbounds = inbounds if any(inbounds) else None
        ordering = coerce_enum(MemOrder, ordering)
        if ordering == MemOrder.WEAK and scope is not None:
            raise ValueError("a weak load/store takes no memory scope (Ops.td verifier)")
        return {"ordering": ordering,
                "scope": None if scope is None else coerce_enum(MemScope, scope),
                "hints": normalize_hints(hints, always_default=False), "inbounds": inbounds,
                "view": view, "index": index, "token": token}

    def load_view_tko(self, view: Value, index, token: Value | None = None, ordering="weak",
                      scope=None, hints=None, inbounds=None) -> tuple[Value, Value]:
        """Load the tile at `index` of a partition view; returns (tile, result token).

        hints: {"sm_90": {"latency": 3, "allow_tma": True}, ...}; inbounds (13.4+): per index.
        """
        f = self._mem(view, index, token, ordering, scope, hints, inbounds)
        pv = view.type
        return self._emit("load_view_tko", [tile(pv.tensor_view.elem, pv.tile_shape), TOKEN],
                          **f).results

    def store_view_tko(self, value: Value, view: Value, index, token: Value | None = None,
                       ordering="weak", scope=None, hints=None, inbounds=None) -> Value:
        f = self._mem(view, index, token, ordering, scope, hints, inbounds)
        want = tile(view.type.tensor_view.elem, view.type.tile_shape)
        if _tile(value, "stored value") != want:
            raise TypeError(f"store of {value.type!r} into a view of {want!r}")
        return self._one("store_view_tko", TOKEN, tile=value, **f)

    # --- constants and elementwise ------------------------------------------------------------

    def constant(self, value, type: TileType) -> Value:
        """A scalar `value` is a splat; a (nested) list gives every element; bytes are raw."""
        return self._one("constant", type, value=pack_constant(value, type))

    def _fbin(self, name, lhs, rhs, rounding="nearest_even", flush_to_zero=False):
        t = _same(name, lhs, rhs)
        _kind(name, t, "float")
        return self._one(name, t, flush_to_zero=bool(flush_to_zero),
                         rounding=coerce_enum(Rounding, rounding), lhs=lhs, rhs=rhs)

    def addf(self, lhs, rhs, rounding="nearest_even", flush_to_zero=False) -> Value:
        return self._fbin("addf", lhs, rhs, rounding, flush_to_zero)

    def subf(self, lhs, rhs, rounding="nearest_even", flush_to_zero=False) -> Value:
        return self._fbin("subf", lhs, rhs, rounding, flush_to_zero)

    def mulf(self, lhs, rhs, rounding="nearest_even", flush_to_zero=False) -> Value:
        return self._fbin("mulf", lhs, rhs, rounding, flush_to_zero)

    def divf(self, lhs, rhs, rounding="nearest_even", flush_to_zero=False) -> Value:
        return self._fbin("divf", lhs, rhs, rounding, flush_to_zero)

    def fma(self, lhs, rhs, acc, rounding="nearest_even", flush_to_zero=False) -> Value:
        t = _same("fma", lhs, rhs, acc)
        _kind("fma", t, "float")
        return self._one("fma", t, flush_to_zero=bool(flush_to_zero),
                         rounding=coerce_enum(Rounding, rounding), lhs=lhs, rhs=rhs, acc=acc)

    def _plain(self, name, kind, *vals, **fields):
        t = _same(name, *vals)
        if kind:
            _kind(name, t, kind)
        names = ("lhs", "rhs") if len(vals) == 2 else ("source",)
        return self._one(name, t, **fields, **dict(zip(names, vals)))

    def remf(self, lhs, rhs) -> Value:
        return self._plain("remf", "float", lhs, rhs)

    def pow(self, lhs, rhs) -> Value:
        return self._plain("pow", "float", lhs, rhs)

    def atan2(self, x, y) -> Value:
        """C's ``atan2(x, y)``: the angle of the point (y, x), x the first operand."""
        t = _same("atan2", x, y)
        _kind("atan2", t, "float")
        return self._one("atan2", t, x=x, y=y)

    def maxf(self, lhs, rhs, propagate_nan=False, flush_to_zero=False) -> Value:
        return self._plain("maxf", "float", lhs, rhs, propagate_nan=bool(propagate_nan),
                           flush_to_zero=bool(flush_to_zero))

    def minf(self, lhs, rhs, propagate_nan=False, flush_to_zero=False) -> Value:
        return self._plain("minf", "float", lhs, rhs, propagate_nan=bool(propagate_nan),
                           flush_to_zero=bool(flush_to_zero))

    def negf(self, x) -> Value:
        return self._plain("negf", "float", x)

    def absf(self, x) -> Value:
        return self._plain("absf", "float", x)

    def floor(self, x) -> Value:
        return self._plain("floor", "float", x)

    def ceil(self, x) -> Value:
        return self._plain("ceil", "float", x)

    def log(self, x) -> Value:
        return self._plain("log", "float", x)

    def log2(self, x) -> Value:
        return self._plain("log2", "float", x)

    def sin(self, x) -> Value:
        return self._plain("sin", "float", x)

    def cos(self, x) -> Value:
        return self._plain("cos", "float", x)

    def tan(self, x) -> Value:
        return self._plain("tan", "float", x)

    def sinh(self, x) -> Value:
        return self._plain("sinh", "float", x)

    def cosh(self, x) -> Value:
        return self._plain("cosh", "float", x)

    def exp(self, x, rounding="full") -> Value:
        return self._plain("exp", "float", x, rounding=coerce_enum(Rounding, rounding))

    def tanh(self, x, rounding="full") -> Value:
        return self._plain("tanh", "float", x, rounding=coerce_enum(Rounding, rounding))

    def exp2(self, x, flush_to_zero=False) -> Value:
        return self._plain("exp2", "float", x, flush_to_zero=bool(flush_to_zero))

    def rsqrt(self, x, flush_to_zero=False) -> Value:
        return self._plain("rsqrt", "float", x, flush_to_zero=bool(flush_to_zero))

    def sqrt(self, x, rounding="nearest_even", flush_to_zero=False) -> Value:
        return self._plain("sqrt", "float", x, flush_to_zero=bool(flush_to_zero),
                           rounding=coerce_enum(Rounding, rounding))

    def addi(self, lhs, rhs, overflow="none") -> Value:
        return self._plain("addi", "int", lhs, rhs, overflow=coerce_enum(Overflow, overflow))

    def subi(self, lhs, rhs, overflow="none") -> Value:
        return self._plain("subi", "int", lhs, rhs, overflow=coerce_enum(Overflow, overflow))

    def muli(self, lhs, rhs, overflow="none") -> Value:
        return self._plain("muli", "int", lhs, rhs, overflow=coerce_enum(Overflow, overflow))

    def shli(self, lhs, rhs, overflow="none") -> Value:
        return self._plain("shli", "int", lhs, rhs, overflow=coerce_enum(Overflow, overflow))

    def divi(self, lhs, rhs, signedness="signed", rounding="zero") -> Value:
        return self._plain("divi", "int", lhs, rhs, signedness=coerce_enum(Signedness,
                           signedness), rounding=coerce_enum(Rounding, rounding))

    def _sgn(self, name, lhs, rhs, signedness):
        return self._plain(name, "int", lhs, rhs,
                           signedness=coerce_enum(Signedness, signedness))

    def remi(self, lhs, rhs, signedness="signed") -> Value:
        return self._sgn("remi", lhs, rhs, signedness)

    def maxi(self, lhs, rhs, signedness="signed") -> Value:
        return self._sgn("maxi", lhs, rhs, signedness)

    def mini(self, lhs, rhs, signedness="signed") -> Value:
        return self._sgn("mini", lhs, rhs, signedness)

    def shri(self, lhs, rhs, signedness="signed") -> Value:
        return self._sgn("shri", lhs, rhs, signedness)

    def negi(self, x, overflow="none") -> Value:
        return self._plain("negi", "int", x, overflow=coerce_enum(Overflow, overflow))

    def absi(self, x) -> Value:
        return self._plain("absi", "int", x)

    def mulhii(self, lhs, rhs) -> Value:
        """The high half of the full-width product."""
        return self._plain("mulhii", "int", lhs, rhs)

    def andi(self, lhs, rhs) -> Value:
        return self._plain("andi", "int", lhs, rhs)

    def ori(self, lhs, rhs) -> Value:
        return self._plain("ori", "int", lhs, rhs)

    def xori(self, lhs, rhs) -> Value:
        return self._plain("xori", "int", lhs, rhs)

    def cmpf(self, predicate, lhs, rhs, ordering="ordered") -> Value:
        t = _same("cmpf", lhs, rhs)
        _kind("cmpf", t, "float")
        return self._one("cmpf", tile(I1, t.shape), predicate=coerce_enum(CmpPred, predicate),
                         ordering=coerce_enum(Ordering, ordering), lhs=lhs, rhs=rhs)

    def cmpi(self, predicate, lhs, rhs, signedness="signed") -> Value:
        t = _same("cmpi", lhs, rhs)
        _kind("cmpi", t, "int")
        return self._one("cmpi", tile(I1, t.shape), predicate=coerce_enum(CmpPred, predicate),
                         signedness=coerce_enum(Signedness, signedness), lhs=lhs, rhs=rhs)

    def select(self, cond, if_true, if_false) -> Value:
        t = _same("select", if_true, if_false)
        if _tile(cond, "select condition") != tile(I1, t.shape):
            raise TypeError(f"select condition must be {tile(I1, t.shape)!r}, got {cond.type!r}")
        return self._one("select", t, cond=cond, if_true=if_true, if_false=if_false)

    # --- shape ops ----------------------------------------------------------------------------

    def iota(self, type: TileType) -> Value:
        """0, 1, ..., n-1 as a 1-d integer tile of type `type`."""
        if type.rank != 1 or type.elem.kind != "int":
            raise TypeError(f"iota makes a 1-d integer tile, not {type!r}")
        return self._one("iota", type)

    def broadcast(self, x, shape) -> Value:
        t = _tile(x, "broadcast operand")
        shape = tuple(shape)
        if len(shape) != t.rank or any(a not in (1, b) for a, b in zip(t.shape, shape)):
            raise ValueError(f"cannot broadcast {t!r} to {shape} (reshape to the rank first)")
        return self._one("broadcast", tile(t.elem, shape), source=x)

    def reshape(self, x, shape) -> Value:
        t = _tile(x, "reshape operand")
        if math.prod(shape) != math.prod(t.shape):
            raise ValueError(f"cannot reshape {t!r} to {tuple(shape)}")
        return self._one("reshape", tile(t.elem, shape), source=x)

    def permute(self, x, permutation) -> Value:
        t = _tile(x, "permute operand")
        perm = tuple(int(p) for p in permutation)
        if sorted(perm) != list(range(t.rank)):
            raise ValueError(f"{perm} is not a permutation of {t.rank} dims")
        return self._one("permute", tile(t.elem, [t.shape[p] for p in perm]),
                         permutation=perm, source=x)

    # --- mma and conversions ------------------------------------------------------------------

    def _mma_check(self, name, lhs, rhs, acc):
        a, b, c = (_tile(v, f"{name} operand") for v in (lhs, rhs, acc))
        if a.rank not in (2, 3) or not (a.rank == b.rank == c.rank) or a.shape[-1] != \
                b.shape[-2] or c.shape[-2:] != (a.shape[-2], b.shape[-1]):
            raise TypeError(f"{name}: shapes {a!r} x {b!r} -> {c!r} do not chain")
        return c

    def mmaf(self, lhs, rhs, acc, fast_acc=False) -> Value:
        c = self._mma_check("mmaf", lhs, rhs, acc)
        return self._one("mmaf", c, fast_acc=bool(fast_acc), lhs=lhs, rhs=rhs, acc=acc)

    def mmai(self, lhs, rhs, acc, signedness_lhs="signed", signedness_rhs="signed") -> Value:
        c = self._mma_check("mmai", lhs, rhs, acc)
        return self._one("mmai", c, signedness_lhs=coerce_enum(Signedness, signedness_lhs),
                         signedness_rhs=coerce_enum(Signedness, signedness_rhs),
                         lhs=lhs, rhs=rhs, acc=acc)

    def _cvt(self, name, x, to, src_kind, dst_kind, **fields):
        t = _tile(x, f"{name} operand")
        to = _elem_of(to)
        if src_kind:
            _kind(name, t, src_kind)
        if dst_kind and to.kind != dst_kind:
            raise TypeError(f"{name} converts to a {dst_kind} type, not {to!r}")
        return self._one(name, tile(to, t.shape), **fields, source=x)

    def ftof(self, x, to, rounding="nearest_even") -> Value:
        return self._cvt("ftof", x, to, "float", "float", rounding=coerce_enum(Rounding, rounding))

    def itof(self, x, to, signedness="signed", rounding="nearest_even") -> Value:
        return self._cvt("itof", x, to, "int", "float",
                         signedness=coerce_enum(Signedness, signedness),
                         rounding=coerce_enum(Rounding, rounding))

    def ftoi(self, x, to, signedness="signed", rounding="nearest_int_to_zero",
             saturating=False) -> Value:
        return self._cvt("ftoi", x, to, "float", "int", saturating=bool(saturating),
                         signedness=coerce_enum(Signedness, signedness),
                         rounding=coerce_enum(Rounding, rounding))

    def exti(self, x, to, signedness="signed") -> Value:
        return self._cvt("exti", x, to, "int", "int",
                         signedness=coerce_enum(Signedness, signedness))

    def trunci(self, x, to, overflow="none") -> Value:
        return self._cvt("trunci", x, to, "int", "int", overflow=coerce_enum(Overflow, overflow))

    def bitcast(self, x, to) -> Value:
        t = _tile(x, "bitcast operand")
        to = _elem_of(to)
        if isinstance(t.elem, ScalarType) and t.elem.bits != to.bits:
            raise TypeError(f"bitcast {t!r} to {to!r} changes the width")
        return self._one("bitcast", tile(to, t.shape), source=x)

    # --- facts --------------------------------------------------------------------------------

    def assume(self, value: Value, predicate) -> Value:
        """`value` with a fact attached (DivBy, Bounded or SameElements); use the result."""
        if not isinstance(predicate, (DivBy, Bounded, SameElements)):
            raise TypeError(f"assume takes DivBy, Bounded or SameElements, got {predicate!r}")
        return self._one("assume", value.type, predicate=predicate, value=value)

    def assume_div_by(self, value, divisor: int, every: int | None = None,
                      along: int | None = None) -> Value:
        return self.assume(value, DivBy(int(divisor), every, along))

    def assume_bounded(self, value, lb: int | None = None, ub: int | None = None) -> Value:
        return self.assume(value, Bounded(lb, ub))

    def assume_same_elements(self, value, values) -> Value:
        return self.assume(value, SameElements(tuple(int(v) for v in values)))

    # --- control flow -------------------------------------------------------------------------

    def for_(self, lb: Value, ub: Value, step: Value, inits=(), body=None,
             unsigned_cmp=False):
        """``for iv in [lb, ub) step step`` carrying `inits`; the body ends with continue_.

        With `body(iv, args)`: builds it and returns the results tuple; without: a ForLoop
        to use as a context manager (``loop.iv``, ``loop.args``, ``loop.results``).
        """
        t = _same("for bounds", lb, ub, step)
        if t.shape or t.elem.kind != "int":
            raise TypeError(f"for bounds are 0-d integer tiles, got {t!r}")
        inits = tuple(inits)
        region = Block([Value(t)] + [Value(v.type) for v in inits])
        op = self._emit("for", [v.type for v in inits], [region], unsigned_cmp=bool(unsigned_cmp),
                        operands=(lb, ub, step) + inits)
        loop = ForLoop(self, op)
        if body is None:
            return loop
        with loop:
            body(loop.iv, loop.args)
        return loop.results

    def loop(self, inits=(), result_types=(), body=None):
        """An unbounded loop: body(args) ends with continue_(next args) or break_(results)."""
        inits = tuple(inits)
        region = Block([Value(v.type) for v in inits])
        op = self._emit("loop", list(result_types), [region], inits=inits)
        handle = LoopRegion(self, op)
        if body is None:
            return handle
        with handle:
            body(handle.args)
        return handle.results

    def if_(self, cond: Value, result_types=(), then=None, else_=None):
        """Two regions ending in yield_; callbacks then()/else_() or the IfRegion handle."""
        if _tile(cond, "if condition") != tile(I1):
            raise TypeError(f"if condition must be tile<i1>, got {cond.type!r}")
        else_block = Block()
        if not result_types:  # a result-less if without else: an else holding only `yield`
            else_block.ops.append(Op("yield", (), {"operands": ()}))
        op = self._emit("if", list(result_types), [Block(), else_block], cond=cond)
        handle = IfRegion(self, op)
        handle.implicit_yield = else_block.ops[0] if else_block.ops else None
        if then is None:
            return handle
        with handle.then_():
            then()
        if else_ is not None:
            with handle.else_():
                else_()
        return handle.results

    def _reduction(self, name, operands, dim, identities, body, **extra):
        operands = tuple(operands)
        t0 = _tile(operands[0], f"{name} operand")
        if any(_tile(v, f"{name} operand").shape != t0.shape for v in operands):
            raise TypeError(f"{name} operands must share one shape")
        if not 0 <= dim < t0.rank:
            raise ValueError(f"{name} dim {dim} out of range for {t0!r}")
        if len(identities) != len(operands):
            raise ValueError(f"{name} needs one identity per operand")
        idents = tuple(i if isinstance(i, Scalar) else Scalar(v.type.elem, i)
                       for i, v in zip(identities, operands))
        out_shape = t0.shape if name == "scan" else t0.shape[:dim] + t0.shape[dim + 1:]
        region = Block([Value(tile(v.type.elem)) for v in operands for _ in (0, 1)])
        op = self._emit(name, [tile(v.type.elem, out_shape) for v in operands], [region],
                        dim=int(dim), **extra, identities=idents, operands=operands)
        self._push(region)
        ok = False
        try:
            body(*region.args)
            ok = True
        finally:
            self._pop(op, 0, check=ok)
        return op.results

    def reduce(self, operands, dim: int, identities, body) -> tuple[Value, ...]:
        """Reduce each operand over `dim`; `body(elem0, acc0, elem1, acc1, ...)` yields."""
        return self._reduction("reduce", operands, dim, identities, body)

    def scan(self, operands, dim: int, identities, body, reverse=False) -> tuple[Value, ...]:
        return self._reduction("scan", operands, dim, identities, body, reverse=bool(reverse))

    def _term(self, name, values) -> None:
        values = tuple(values)
        if any(not isinstance(v, Value) for v in values):
            raise TypeError(f"{name} takes values")
        self._emit(name, [], operands=values)

    def continue_(self, values=()) -> None:
        self._term("continue", values)

    def break_(self, values=()) -> None:
        self._term("break", values)

    def yield_(self, values=()) -> None:
        self._term("yield", values)

    def return_(self, values=()) -> None:
        self._term("return", values)


def check_terminated(op: Op, index: int, block: Block) -> None:
    """Raise unless region `index` of `op` ends with a terminator it allows.
    """
    allowed = REGION_TERMINATORS[op.name]
    last = block.ops[-1].name if block.ops else None
    if last not in allowed:
        raise ValueError(f"region {index} of {op.name} must end with "
                         f"{' or '.join(sorted(allowed))}, not {last or 'nothing'}")
