"""Builder methods of the pointer-tile ops: ``offset``, ``ptr_to_ptr``, loads and stores through
pointer tiles and the atomics (gathers, scatters, histograms), mixed into ``builder.Builder``.

A pointer tile is a tile of ``ptr<T>``: a kernel's 0-d pointer parameter reshaped and broadcast
to a shape, then advanced element-wise by ``offset`` (in elements, a signed integer tile). The
memory ops take an optional ``i1`` mask of the same shape: a masked-out element is not read
(a load gives ``padding`` there), written or updated. Atomics are ``relaxed`` at ``device``
scope unless told otherwise; ``weak`` loads and stores take no scope.

Source of facts: NVIDIA/cuda-tile ``Ops.td`` (OffsetOp, PtrToPtrOp, LoadPtrTkoOp,
StorePtrTkoOp, AtomicRMWTkoOp, AtomicCASTkoOp: operand types, which mode takes which element
type).
"""
from __future__ import annotations

from fearless.backends.tileir.tir import (
    I1,
    TOKEN,
    AtomicMode,
    MemOrder,
    MemScope,
    PtrType,
    TileType,
    Value,
    coerce_enum,
    normalize_hints,
    tile,
)

_RMW_TYPES = {  # Ops.td AtomicRMWTkoOp: the element types each mode takes
    AtomicMode.ADDF: ("f16", "bf16", "f32", "f64"),
    AtomicMode.XCHG: ("i32", "i64", "f32", "f64"),
}
_RMW_INT = ("i32", "i64")
_CAS_TYPES = ("i32", "i64", "f32", "f64")


def _ptrs(v: Value, what: str) -> TileType:
    t = v.type if isinstance(v, Value) else None
    if not isinstance(t, TileType) or not isinstance(t.elem, PtrType):
        raise TypeError(f"{what} must be a tile of pointers, got {t!r}")
    return t


def _check_mask(mask, shape) -> None:
    if mask is not None and (not isinstance(mask, Value) or mask.type != tile(I1, shape)):
        raise TypeError(f"mask must be {tile(I1, shape)!r}, got {getattr(mask, 'type', mask)!r}")


def _check_token(token) -> None:
    if token is not None and token.type != TOKEN:
        raise TypeError("token must be a token value")


class PointerOps:
    """The pointer-tile ops of ``Builder`` (which supplies ``_one`` and ``_emit``)."""

    def offset(self, ptrs: Value, offsets: Value) -> Value:
        """``ptrs + offsets`` elements, element-wise (``offsets`` a signed integer tile)."""
        t = _ptrs(ptrs, "offset base")
        o = offsets.type
        if not isinstance(o, TileType) or o.shape != t.shape or o.elem.kind != "int":
            raise TypeError(f"offsets must be an integer tile of shape {t.shape}, got {o!r}")
        return self._one("offset", t, ptr=ptrs, offset=offsets)

    def ptr_to_ptr(self, ptrs: Value, elem) -> Value:
        """The same addresses as pointers to ``elem`` (an atomic on the bits of a float)."""
        t = _ptrs(ptrs, "ptr_to_ptr source")
        return self._one("ptr_to_ptr", tile(PtrType(elem), t.shape), source=ptrs)

    def _memory(self, ordering, scope, hints, allowed) -> dict:
        ordering = coerce_enum(MemOrder, ordering)
        if ordering.name.lower() not in allowed:
            raise ValueError(f"ordering {ordering.name.lower()} is not one of {allowed}")
        if ordering == MemOrder.WEAK and scope is not None:
            raise ValueError("a weak load/store takes no memory scope (Ops.td verifier)")
        return {"ordering": ordering,
                "scope": None if scope is None else coerce_enum(MemScope, scope),
                "hints": normalize_hints(hints, always_default=False)}

    def load_ptr_tko(self, ptrs: Value, mask: Value | None = None, padding: Value | None = None,
                     token: Value | None = None, ordering="weak", scope=None,
                     hints=None) -> tuple[Value, Value]:
        """Load every element of pointer tile ``ptrs``; returns (tile, result token). Where
        ``mask`` is false nothing is read and the result is ``padding`` (a tile of the result
        type; without one, undefined)."""
        t = _ptrs(ptrs, "load_ptr_tko source")
        _check_mask(mask, t.shape)
        _check_token(token)
        out = tile(t.elem.elem, t.shape)
        if padding is not None and padding.type != out:
            raise TypeError(f"padding must be {out!r}, got {padding.type!r}")
        f = self._memory(ordering, scope, hints, ("weak", "relaxed", "acquire"))
        return self._emit("load_ptr_tko", [out, TOKEN], **f, source=ptrs, mask=mask,
                          padding=padding, token=token).results

    def store_ptr_tko(self, value: Value, ptrs: Value, mask: Value | None = None,
                      token: Value | None = None, ordering="weak", scope=None,
                      hints=None) -> Value:
        """Store ``value`` at every pointer of ``ptrs`` where ``mask`` holds; the result token."""
        t = _ptrs(ptrs, "store_ptr_tko destination")
        if value.type != tile(t.elem.elem, t.shape):
            raise TypeError(f"store of {value.type!r} through {t!r}")
        _check_mask(mask, t.shape)
        _check_token(token)
        f = self._memory(ordering, scope, hints, ("weak", "relaxed", "release"))
        return self._one("store_ptr_tko", TOKEN, **f, destination=ptrs, value=value, mask=mask,
                         token=token)

    def atomic_rmw_tko(self, ptrs: Value, mode, arg: Value, mask: Value | None = None,
                       token: Value | None = None, ordering="relaxed",
                       scope="device") -> tuple[Value, Value]:
        """One atomic read-modify-write per element; returns (the old values, result token).
        The old value of a masked-out element is undefined."""
        t = _ptrs(ptrs, "atomic_rmw_tko pointers")
        mode = coerce_enum(AtomicMode, mode)
        elem = t.elem.elem
        if arg.type != tile(elem, t.shape):
            raise TypeError(f"atomic {mode.name.lower()} of {arg.type!r} through {t!r}")
        if elem.name not in _RMW_TYPES.get(mode, _RMW_INT):
            raise TypeError(f"atomic {mode.name.lower()} does not take {elem!r}")
        _check_mask(mask, t.shape)
        _check_token(token)
        f = self._memory(ordering, None, None, ("relaxed", "acquire", "release", "acq_rel"))
        return self._emit("atomic_rmw_tko", [arg.type, TOKEN], ordering=f["ordering"],
                          scope=coerce_enum(MemScope, scope), mode=mode, pointers=ptrs, arg=arg,
                          mask=mask, token=token).results

    def atomic_cas_tko(self, ptrs: Value, cmp: Value, val: Value, mask: Value | None = None,
                       token: Value | None = None, ordering="relaxed",
                       scope="device") -> tuple[Value, Value]:
        """Per element, atomically: store ``val`` where memory equals ``cmp`` (bitwise);
        returns (the old values, result token); a masked-out element gives ``cmp``."""
        t = _ptrs(ptrs, "atomic_cas_tko pointers")
        want = tile(t.elem.elem, t.shape)
        if cmp.type != want or val.type != want:
            raise TypeError(f"compare-and-swap of {cmp.type!r}/{val.type!r} through {t!r}")
        if want.elem.name not in _CAS_TYPES:
            raise TypeError(f"atomic compare-and-swap does not take {want.elem!r}")
        _check_mask(mask, t.shape)
        _check_token(token)
        f = self._memory(ordering, None, None, ("relaxed", "acquire", "release", "acq_rel"))
        return self._emit("atomic_cas_tko", [want, TOKEN], ordering=f["ordering"],
                          scope=coerce_enum(MemScope, scope), pointers=ptrs, cmp=cmp, val=val,
                          mask=mask, token=token).results
