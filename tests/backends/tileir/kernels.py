"""Hand-built Tile IR kernels (through the Builder) shared by the Tile IR tests.

vadd: f32 vector add over a 1-d partition view (tile 1024, dynamic length, div_by<16> pointers).
gemm: 128x128x64 fp16 GEMM, `for` carrying an f32 accumulator, mmaf, ftof, div_by facts and a
      static unit inner stride (the facts that make tileiras pick TMA + wgmma on sm_90).
rowreduce: row sum and max over dim 1 of a 16x256 f32 tile, broadcast back (x - max) and stored.
masked: relu with cmpf/select, an iota-based bounds mask (cmpi), and an `if` with results.
pointers: a gather (load_ptr_tko with a bounds mask and -inf padding), a scatter
      (store_ptr_tko), an f32 atomic add and, on the bits of the same pointers (ptr_to_ptr), an
      unsigned atomic max and a compare-and-swap, ordered by tokens.
"""
from __future__ import annotations

from fearless.backends.tileir.tir import (
    F16,
    F32,
    I32,
    Module,
    ptr,
    tensor_view,
    tile,
)

P32, P16, S = tile(ptr(F32)), tile(ptr(F16)), tile(I32)


def _view1d(b, p, n, tile_n=1024):
    p = b.assume_div_by(p, 16)
    n = b.assume_bounded(n, 0, None)
    tv = b.make_tensor_view(p, tensor_view(F32, (None,), (1,)), [n])
    return b.make_partition_view(tv, (tile_n,))


def vadd(version=(13, 4)) -> Module:
    m = Module(version)
    fn = m.entry("vadd", [P32, S, P32, S, P32, S])
    b = fn.builder()
    a, na, x, nx, c, nc = fn.params
    tok = b.make_token()
    va, vx, vc = _view1d(b, a, na), _view1d(b, x, nx), _view1d(b, c, nc)
    bx, _, _ = b.get_tile_block_id()
    ta, _ = b.load_view_tko(va, [bx], token=tok)
    tx, _ = b.load_view_tko(vx, [bx], token=tok)
    b.store_view_tko(b.addf(ta, tx), vc, [bx], token=tok)
    b.return_()
    return m


def _matrix(b, p, rows, cols, ld, elem, tile_shape):
    p = b.assume_div_by(p, 16)
    rows, cols, ld = (b.assume_div_by(v, 8) for v in (rows, cols, ld))
    tv = b.make_tensor_view(p, tensor_view(elem, (None, None), (None, 1)), [rows, cols], [ld])
    return b.make_partition_view(tv, tile_shape)


def gemm(version=(13, 4), hints=None, fast_acc=False) -> Module:
    m = Module(version)
    fn = m.entry("gemm", [P16, P16, P16, S, S, S, S, S, S], hints=hints)
    b = fn.builder()
    pa, pb, pc, m_, n_, k_, lda, ldb, ldc = fn.params
    va = _matrix(b, pa, m_, k_, lda, F16, (128, 64))
    vb = _matrix(b, pb, k_, n_, ldb, F16, (64, 128))
    vc = _matrix(b, pc, m_, n_, ldc, F16, (128, 128))
    tok = b.make_token()
    bx, by, _ = b.get_tile_block_id()
    _, ktiles = b.get_index_space_shape(va)
    zero, one = b.constant(0, S), b.constant(1, S)
    acc0 = b.constant(0.0, tile(F32, (128, 128)))
    with b.for_(zero, ktiles, one, [acc0]) as loop:
        (acc,) = loop.args
        ta, _ = b.load_view_tko(va, [bx, loop.iv], token=tok,
                                hints={"sm_90": {"latency": 3}})
        tb, _ = b.load_view_tko(vb, [loop.iv, by], token=tok)
        b.continue_([b.mmaf(ta, tb, acc, fast_acc=fast_acc)])
    (acc,) = loop.results
    b.store_view_tko(b.ftof(acc, F16), vc, [bx, by], token=tok)
    b.return_()
    return m


def rowreduce(version=(13, 4)) -> Module:
    m = Module(version)
    fn = m.entry("rowreduce", [P32, S, S, S, P32, S, S, S])
    b = fn.builder()
    px, rows, cols, ld, py, rows_y, cols_y, ld_y = fn.params
    vx = _matrix(b, px, rows, cols, ld, F32, (16, 256))
    vy = _matrix(b, py, rows_y, cols_y, ld_y, F32, (16, 256))
    bx, _, _ = b.get_tile_block_id()
    zero = b.constant(0, S)
    x, _ = b.load_view_tko(vx, [bx, zero])
    (total,) = b.reduce([x], 1, [0.0], lambda e, acc: b.yield_([b.addf(e, acc)]))
    (peak,) = b.reduce([x], 1, [float("-inf")], lambda e, acc: b.yield_([b.maxf(e, acc)]))
    peak = b.broadcast(b.reshape(peak, (16, 1)), (16, 256))
    total = b.broadcast(b.reshape(total, (16, 1)), (16, 256))
    b.store_view_tko(b.divf(b.subf(x, peak), total), vy, [bx, zero])
    b.return_()
    return m


def masked(version=(13, 4)) -> Module:
    m = Module(version)
    fn = m.entry("masked", [P32, S, P32, S])
    b = fn.builder()
    px, nx, py, ny = fn.params
    vx, vy = _view1d(b, px, nx), _view1d(b, py, ny)
    bx, _, _ = b.get_tile_block_id()
    x, _ = b.load_view_tko(vx, [bx], inbounds=[True] if version >= (13, 4) else None)
    zero = b.constant(0.0, tile(F32, (1024,)))
    relu = b.select(b.cmpf("gt", x, zero), x, zero)
    start = b.muli(bx, b.constant(1024, S))
    idx = b.addi(b.iota(tile(I32, (1024,))), b.broadcast(b.reshape(start, (1,)), (1024,)))
    inside = b.cmpi("lt", idx, b.broadcast(b.reshape(nx, (1,)), (1024,)))
    y = b.select(inside, relu, zero)
    first = b.cmpi("eq", bx, b.constant(0, S))
    br = b.if_(first, [y.type])
    with br.then_():
        b.yield_([b.mulf(y, b.constant(2.0, y.type))])
    with br.else_():
        b.yield_([y])
    (out,) = br.results
    b.store_view_tko(out, vy, [bx])
    b.return_()
    return m


def pointers(version=(13, 4)) -> Module:
    m = Module(version)
    fn = m.entry("pointers", [P32, S])
    b = fn.builder()
    p, n = fn.params
    tok = b.make_token()
    bx, _, _ = b.get_tile_block_id()
    idx = b.addi(b.iota(tile(I32, (256,))), b.broadcast(b.reshape(b.muli(bx, b.constant(
        256, S)), (1,)), (256,)))
    inside = b.cmpi("lt", idx, b.broadcast(b.reshape(n, (1,)), (256,)), signedness="unsigned")
    ptrs = b.offset(b.broadcast(b.reshape(p, (1,)), (256,)), idx)
    pad = b.constant(float("-inf"), tile(F32, (256,)))
    x, tok = b.load_ptr_tko(ptrs, inside, pad, token=tok)
    tok = b.store_ptr_tko(b.mulf(x, x), ptrs, inside, token=tok)
    _, tok = b.atomic_rmw_tko(ptrs, "addf", x, inside, token=tok)
    bits = b.ptr_to_ptr(ptrs, I32)
    old, tok = b.atomic_rmw_tko(bits, "umax", b.bitcast(x, I32), inside, token=tok)
    b.atomic_cas_tko(bits, old, idx, inside, token=tok)
    b.return_()
    return m


GOLDEN = {"vadd": vadd, "gemm": gemm, "rowreduce": rowreduce, "masked": masked,
          "pointers": pointers}

# lines (substrings) tileirdisasm must print for each golden kernel
EXPECTED = {
    "vadd": [
        "assume div_by<16>, %arg0 : tile<ptr<f32>>",
        ("make_tensor_view %assume, shape = [%assume_0], strides = [1] : tile<i32> -> "
         "tensor_view<?xf32, strides=[1]>"),
        "partition_view<tile=(1024), tensor_view<?xf32, strides=[1]>>",
        "get_tile_block_id : tile<i32>",
        "load_view_tko weak %pview[%blockId_x] token = %0",
        "addf %tile, %tile_",
        "store_view_tko weak",
        "return",
    ],
    "gemm": [
        "tensor_view<?x?xf16, strides=[?,1]>",
        "partition_view<tile=(128x64), tensor_view<?x?xf16, strides=[?,1]>>",
        "assume div_by<8>, %arg3 : tile<i32>",
        "get_index_space_shape",
        "constant <f32: 0.000000e+00> : tile<128x128xf32>",
        "for %loopIdx in (",
        "iter_values(%iterArg0 = ",
        "-> (tile<128x128xf32>)",
        "mmaf %tile, %tile_",
        ": tile<128x64xf16>, tile<64x128xf16>, tile<128x128xf32>",
        "continue %",
        "ftof %for",
        "tile<128x128xf32> -> tile<128x128xf16>",
        "optimization_hints = <sm_90 = {latency = 3}>",
    ],
    "rowreduce": [
        "reduce %tile dim=1 identities=[0.000000e+00 : f32] : tile<16x256xf32> -> tile<16xf32>",
        "identities=[0xFF800000 : f32]",
        "maxf %",
        "yield %",
        "reshape %",
        "tile<16xf32> -> tile<16x1xf32>",
        "broadcast %",
        "tile<16x1xf32> -> tile<16x256xf32>",
        "subf %tile, %",
        "divf %",
    ],
    "masked": [
        "cmpf greater_than ordered %tile, %cst",
        "select %",
        "iota : tile<1024xi32>",
        "cmpi less_than %",
        "cmpi equal %blockId_x, %",
        "= if %",
        "yield %",
        "else {",
        "mulf %",
    ],
    "pointers": [
        "offset %bcast",
        ": tile<256xptr<f32>>, tile<256xi32> -> tile<256xptr<f32>>",
        "constant <f32: 0xFF800000> : tile<256xf32>",
        "= load_ptr_tko weak %",
        "tile<256xptr<f32>>, tile<256xi1>, tile<256xf32> -> tile<256xf32>, token",
        "= store_ptr_tko weak %",
        "= atomic_rmw_tko relaxed device %",
        ", addf, %",
        "ptr_to_ptr %",
        "tile<256xptr<f32>> -> tile<256xptr<i32>>",
        ", umax, %",
        "= atomic_cas_tko relaxed device %",
    ],
}
