"""Every op of the Tile IR op table, built, encoded, decoded and re-encoded; plus determinism.

When tileirdisasm is installed, the same module is also disassembled, which checks every op's
payload against NVIDIA's own reader.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from fearless.backends.tileir import tileiras
from fearless.backends.tileir.ops import SPECS, SUPPORTED_VERSIONS
from fearless.backends.tileir.reader import decode
from fearless.backends.tileir.tir import (
    BF16,
    F16,
    F32,
    F64,
    I8,
    I16,
    I32,
    I64,
    TOKEN,
    Module,
    Scalar,
    dump,
    ptr,
    tensor_view,
    tile,
)
from tests.backends.tileir.kernels import GOLDEN


def all_ops(version) -> Module:
    """One module that uses every op in ops.SPECS that ``version`` has at least once (types
    valid, values silly)."""
    m = Module(version)
    V = tile(F32, (8,))
    fn = m.entry("all_ops", [tile(ptr(F32)), tile(I32), tile(I32)],
                 hints={"sm_90": {"num_cta_in_cga": 2, "occupancy": 1}})
    b = fn.builder()
    p, n, s = fn.params
    tok = b.join_tokens([b.make_token(), b.make_token()])
    if version >= (13, 4):  # grid dependency control arrived in 13.4
        tok = b.join_tokens([tok, b.gdc_wait(), b.gdc_launch_dependents()])
    tv = b.make_tensor_view(p, tensor_view(F32, (None, 64), (None, 1)), [n], [s])
    pv = b.make_partition_view(tv, (8, 8), padding="zero")
    bx, by, _ = b.get_tile_block_id()
    nb = b.get_num_tile_blocks()
    b.get_index_space_shape(pv)
    inb = [True, False] if version >= (13, 4) else None
    t, tok2 = b.load_view_tko(pv, [bx, by], token=tok, scope="device", ordering="acquire",
                              hints={"sm_90": {"latency": 2, "allow_tma": False}},
                              inbounds=inb)
    b.store_view_tko(t, pv, [nb[0], by], token=tok2)
    x = b.constant([float(i) for i in range(8)], V)
    y = b.constant(1.5, V)
    for name in ("addf", "subf", "mulf", "divf"):
        getattr(b, name)(x, y, rounding="nearest_even", flush_to_zero=name == "mulf")
    b.fma(x, y, x)
    for name in ("remf", "pow", "atan2"):
        getattr(b, name)(x, y)
    b.maxf(x, y, propagate_nan=True)
    b.minf(x, y)
    for name in ("negf", "absf", "floor", "ceil", "log", "log2", "sin", "cos", "tan",
                 "exp", "tanh", "exp2", "rsqrt", "sqrt"):
        getattr(b, name)(x)
    b.sinh(x)
    b.cosh(x)
    i = b.iota(tile(I32, (8,)))
    j = b.constant(3, tile(I32, (8,)))
    for name in ("addi", "subi", "muli", "shli"):
        getattr(b, name)(i, j, overflow="nsw")
    b.divi(i, j, signedness="unsigned")
    for name in ("remi", "maxi", "mini", "shri"):
        getattr(b, name)(i, j)
    for name in ("andi", "ori", "xori"):
        getattr(b, name)(i, j)
    b.negi(i)
    b.absi(i)
    b.mulhii(i, j)
    mask = b.cmpf("lt", x, y, ordering="unordered")
    b.select(b.cmpi("ge", i, j, signedness="unsigned"), x, y)
    b.select(mask, x, y)
    x2 = b.reshape(x, (2, 4))
    b.permute(x2, (1, 0))
    b.broadcast(b.reshape(b.constant(2.0, tile(F32)), (1, 1)), (4, 4))
    h = b.ftof(x, F16)
    b.ftof(x, BF16, rounding="zero")
    b.ftof(x, F64)
    b.itof(i, F32)
    b.ftoi(x, I32)
    b.exti(i, I64)
    b.trunci(i, I16)
    b.trunci(i, I8)
    b.bitcast(x, I32)
    a16 = b.reshape(b.ftof(b.constant(1.0, tile(F32, (16,))), F16), (4, 4))
    b.mmaf(a16, a16, b.constant(0.0, tile(F32, (4, 4))), fast_acc=True)
    a8 = b.constant(1, tile(I8, (4, 4)))
    b.mmai(a8, a8, b.constant(0, tile(I32, (4, 4))), signedness_rhs="unsigned")
    b.assume_div_by(p, 16)
    b.assume_div_by(i, 4, every=4, along=0)
    b.assume_bounded(n, 0, 1 << 20)
    b.assume_bounded(n, None, -3)
    b.assume_same_elements(i, [4])
    zero, one = b.constant(0, tile(I32)), b.constant(1, tile(I32))
    acc = b.for_(zero, n, one, [x], lambda iv, args: b.continue_([b.addf(args[0], y)]),
                 unsigned_cmp=True)
    b.loop([zero], [tile(I32)], lambda args: b.break_([args[0]]))
    lp = b.loop([one], [])
    with lp:
        br = b.if_(b.cmpi("eq", lp.args[0], zero))
        with br.then_():
            b.break_()
        with br.else_():
            b.continue_([lp.args[0]])
        # the if's regions end the loop body's paths, but the loop body still needs its own
        b.continue_([lp.args[0]])
    b.if_(b.cmpi("eq", bx, zero), [V], lambda: b.yield_([acc[0]]), lambda: b.yield_([y]))
    b.reduce([x, i], 0, [0.0, Scalar(I32, -(1 << 31))],
             lambda e0, a0, e1, a1: b.yield_([b.addf(e0, a0), b.maxi(e1, a1)]))
    b.scan([h], 0, [float("-inf")], lambda e, a: b.yield_([b.maxf(e, a)]), reverse=True)
    ptrs = b.offset(b.broadcast(b.reshape(p, (1,)), (8,)), i)
    inside = b.cmpi("lt", i, j)
    got, tok3 = b.load_ptr_tko(ptrs, inside, y, token=tok, hints={"sm_90": {"latency": 3}})
    b.load_ptr_tko(ptrs, ordering="relaxed", scope="device")
    tok4 = b.store_ptr_tko(got, ptrs, inside, token=tok3)
    b.store_ptr_tko(got, ptrs)
    b.atomic_rmw_tko(ptrs, "addf", x, inside, token=tok4)
    ints = b.ptr_to_ptr(ptrs, I32)
    b.atomic_rmw_tko(ints, "umax", i, ordering="acq_rel", scope="sys")
    b.atomic_cas_tko(ints, i, j, inside, token=tok4)
    b.atomic_cas_tko(ptrs, x, y)
    b.return_()
    return m


def ops_used(module: Module) -> set[str]:
    seen = set()

    def walk(block):
        for op in block.ops:
            seen.add(op.name)
            for r in op.regions:
                walk(r)
    for fn in module.functions:
        walk(fn.body)
    return seen


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
def test_every_op_round_trips(version):
    m = all_ops(version)
    missing = {name for name, spec in SPECS.items() if spec.since <= version} - ops_used(m)
    assert not missing, f"ops not covered by the round-trip module: {sorted(missing)}"
    data = m.encode()
    back = decode(data)
    assert back.encode() == data
    assert dump(back) == dump(m)
    assert TOKEN  # the token type is exercised by join_tokens above


@pytest.mark.parametrize("name", sorted(GOLDEN))
@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
def test_golden_kernels_round_trip_and_are_deterministic(name, version):
    data = GOLDEN[name](version).encode()
    assert GOLDEN[name](version).encode() == data  # a fresh build gives the same bytes
    back = decode(data)
    assert back.encode() == data
    assert dump(back) == dump(GOLDEN[name](version))


@pytest.fixture(scope="module")
def toolchain():
    tc = tileiras.find()
    if tc is None:
        pytest.skip("tileiras is not installed (pip install 'fearless[tile]')")
    return tc


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
def test_tileirdisasm_reads_every_op(toolchain, version):
    text = toolchain.disasm(all_ops(version).encode())
    for needle in ("join_tokens", "padding_value = zero", "mmaf", "mmai", "scan",
                   "same_elements", "div_by<4, every 4 along 0>", "bounded<?, -3>",
                   "optimization_hints=<default = {}, sm_90 = {num_cta_in_cga = 2, occupancy = 1}>",
                   "allow_tma = false", "loop iter_values", "break", "unsigned", "atan2",
                   *(("gdc_wait_tko", "gdc_launch_dependents_tko") if version >= (13, 4) else ())):
        assert needle in text, f"{needle!r} not in disassembly:\n{text}"


CUTILE_VADD = Path(__file__).parent / "data" / "cutile_vadd_13_4.tileirbc"


def test_reads_a_cutile_export():
    # exported by cuTile Python 1.7.0 (export_kernel, bytecode 13.4): debug section included,
    # i1/i32 pre-registered in its type table; our reader skips the former and ignores the order
    data = CUTILE_VADD.read_bytes()
    m = decode(data)
    ours = m.encode()
    assert decode(ours).encode() == ours
    assert [op.name for op in m.functions[0].body.ops].count("assume") == 6


def test_cutile_export_and_ours_disassemble_alike(toolchain):
    data = CUTILE_VADD.read_bytes()
    assert toolchain.disasm(decode(data).encode()) == toolchain.disasm(data)
