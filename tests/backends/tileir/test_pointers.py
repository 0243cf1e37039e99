"""The pointer-tile ops of the Builder (backends/tileir/pointers.py) refuse what Tile IR's
verifier would: an atomic mode on an element type it does not take (Ops.td AtomicRMWTkoOp),
masks, paddings and values of the wrong type, weak atomics. Their encoding is checked by the
round trip and tileirdisasm (test_roundtrip.py) and the golden ``pointers`` kernel
(test_tileiras.py)."""
from __future__ import annotations

import pytest

from fearless.backends.tileir.tir import F16, F32, I1, I32, I64, Module, ptr, tile


def _ptrs(elem, shape=(8,)):
    m = Module((13, 4))
    fn = m.entry("k", [tile(ptr(elem))])
    b = fn.builder()
    (p,) = fn.params
    offsets = b.iota(tile(I32, shape))
    return b, b.offset(b.broadcast(b.reshape(p, (1,)), shape), offsets)


@pytest.mark.parametrize("elem, mode", [(I32, "addf"), (F32, "max"), (F16, "xchg"),
                                        (F32, "umin"), (F16, "and")])
def test_atomic_modes_take_only_their_element_types(elem, mode):
    b, ptrs = _ptrs(elem)
    with pytest.raises(TypeError, match=f"atomic {mode} does not take"):
        b.atomic_rmw_tko(ptrs, mode, b.constant(1, tile(elem, (8,))))


def test_compare_and_swap_takes_32_and_64_bit_elements():
    b, ptrs = _ptrs(F16)
    v = b.constant(1.0, tile(F16, (8,)))
    with pytest.raises(TypeError, match="compare-and-swap does not take f16"):
        b.atomic_cas_tko(ptrs, v, v)
    b, ptrs = _ptrs(I64)
    v = b.constant(1, tile(I64, (8,)))
    old, token = b.atomic_cas_tko(ptrs, v, v)
    assert old.type == tile(I64, (8,))


def test_masks_paddings_values_and_orderings_are_checked():
    b, ptrs = _ptrs(F32)
    with pytest.raises(TypeError, match=r"mask must be tile<8xi1>"):
        b.load_ptr_tko(ptrs, b.constant(True, tile(I1, (4,))))
    with pytest.raises(TypeError, match=r"padding must be tile<8xf32>"):
        b.load_ptr_tko(ptrs, padding=b.constant(0, tile(I32, (8,))))
    with pytest.raises(TypeError, match="store of tile<8xi32>"):
        b.store_ptr_tko(b.constant(0, tile(I32, (8,))), ptrs)
    with pytest.raises(ValueError, match="ordering weak is not one of"):
        b.atomic_rmw_tko(ptrs, "addf", b.constant(1.0, tile(F32, (8,))), ordering="weak")
    with pytest.raises(TypeError, match="offsets must be an integer tile of shape"):
        b.offset(ptrs, b.constant(1.0, tile(F32, (8,))))
