"""The tile passes (``passes.TILE_PASSES``) as units, on IR built by hand, and their place in the
pipeline: each refuses and accepts the right forms, and the verifier runs after each of them.
"""
from __future__ import annotations

import pytest

from fearless import dtypes
from fearless.backends.tileir.lower import lower_tile
from fearless.errors import CompileError, InternalError, SafetyError
from fearless.frontend.spans import Span
from fearless.ir import types as T
from fearless.ir.core import Builder, Function, Param, Region, Value
from fearless.ir.printer import print_function
from fearless.ir.verify import verify
from fearless.passes import TILE_PASSES, PassOptions, memory_order, own_tile, run_all, \
    simplify, tile_subset
from fearless.passes.memory_order import Order

F32 = dtypes.f32
OUT = T.TensorView(F32, 2, T.Role.OUT, (16, 32))
IN = T.TensorView(F32, 2, T.Role.IN)
TILE = T.Tile(F32, (16, 32))
LINE = "    t = ft.load(out, (i, j + 1), (16, 32))"


def span(text: str) -> Span:
    """The span of the first ``text`` on LINE."""
    col = LINE.index(text)
    return Span("k.py", 7, col, col + len(text), LINE)


class Kernel:
    """A tile kernel built op by op: parameters out (Out, tile (16, 32)), x (In), aux (Out)."""

    def __init__(self):
        self.out, self.x, self.aux = Value(OUT, "out"), Value(IN, "x"), Value(OUT, "aux")
        self.b = Builder(Region())
        self.i, self.j = (self.op("tile.block_index", [], axis=k).result for k in (0, 1))

    def op(self, name, operands, types=None, **attrs):
        return self.b.create(name, operands, types, attrs)

    def load(self, tensor, coords=None, shape=(16, 32), **attrs):
        return self.op("tile.load", [tensor, *(coords or (self.i, self.j))], shape=shape,
                       **attrs)

    def function(self) -> Function:
        params = [Param(v.hint, v.type, v) for v in (self.out, self.x, self.aux)]
        return verify(Function("k", params, self.b.region))


def run(fn: Function, name: str) -> Function:
    return verify(dict(TILE_PASSES)[name](fn, PassOptions()))


def test_the_tile_pass_list_is_the_documented_order():
    assert [name for name, _ in TILE_PASSES] == ["own_tile", "subset", "simplify",
                                                 "persistent", "stream_k", "memory_order"]


# own_tile ---------------------------------------------------------------------------------------

def test_reads_of_an_out_at_its_own_tile_and_any_read_of_an_in_are_accepted():
    k = Kernel()
    one = k.op("arith.constant", [], [T.INDEX], value=1).result
    k.op("tile.store", [k.out, k.load(k.out).result])
    k.op("tile.store", [k.aux, k.op("tile.load_own", [k.aux]).result])
    k.load(k.x, (one, k.j), (8, 8))  # an In tensor: any tile, any shape
    assert run(k.function(), "own_tile") is not None


@pytest.mark.parametrize("coords", ["shifted", "swapped", "constant"])
def test_a_read_of_an_out_elsewhere_than_its_own_tile_is_refused(coords):
    k = Kernel()
    one = k.op("arith.constant", [], [T.INDEX], value=1).result
    index = {"shifted": (k.i, k.op("arith.add", [k.j, one]).result),
             "swapped": (k.j, k.i), "constant": (k.i, one)}[coords]
    k.load(k.out, index, load_spans=(span("out"), span("(i, j + 1)"), span("(16, 32)")))
    with pytest.raises(SafetyError) as info:
        own_tile.run(k.function(), PassOptions())
    err = info.value
    assert err.reason == ("an Out partition may be read only at this tile block's own tile, and "
                          "this position is not provably out.tile_index")
    assert err.param == "out" and err.span == span("(i, j + 1)")
    assert err.help.startswith("use out.load() to read this block's own tile")


def test_a_read_of_part_of_an_own_tile_is_refused_under_its_shape():
    k = Kernel()
    k.load(k.out, shape=(8, 32), load_spans=(span("out"), span("(i, j + 1)"), span("(16, 32)")))
    with pytest.raises(SafetyError, match=r"this shape \(8, 32\) is not its tile shape "
                                          r"\(16, 32\)") as info:
        own_tile.run(k.function(), PassOptions())
    assert info.value.span == span("(16, 32)")


def test_load_like_of_an_out_with_another_tile_shape_is_refused_at_the_call():
    k = Kernel()
    small = Value(T.TensorView(F32, 2, T.Role.OUT, (8, 16)), "small")
    k.op("tile.load", [small, k.i, k.j], shape=(16, 32),
         load_like_spans=(span("out"), span("ft"), span("ft.load")))
    fn = Function("k", [Param("out", OUT, k.out), Param("small", small.type, small)],
                  k.b.region)
    with pytest.raises(SafetyError) as info:
        own_tile.run(verify(fn), PassOptions())
    assert "this read takes the tile shape (16, 32) of 'ft', not its own (8, 16)" in \
        info.value.reason
    assert info.value.param == "small" and info.value.span == span("ft.load")


def test_without_the_frontends_spans_the_refusal_points_at_the_load():
    k = Kernel()
    op = k.load(k.out, (k.j, k.i))
    op.span = span("ft.load")
    with pytest.raises(SafetyError, match="not provably out.tile_index") as info:
        own_tile.run(k.function(), PassOptions())
    assert info.value.span == op.span


# subset -----------------------------------------------------------------------------------------

def _with(name, operands=None, types=None, **attrs):
    k = Kernel()
    t = k.load(k.x).result
    op = k.op(name, [t] if operands is None else operands(k),
              [TILE] if types is None else types, **attrs)
    op.span = span("ft.load")
    return k.function()


@pytest.mark.parametrize("name, reason", [("math.asin", "math.asin has no Tile IR operation"),
                                          ("math.isnan", "math.isnan has no Tile IR operation")])
def test_what_has_no_tile_ir_operation_is_refused(name, reason):
    types = [T.Tile(dtypes.bool_, (16, 32))] if name == "math.isnan" else None
    with pytest.raises(CompileError) as info:
        run(_with(name, types=types), "subset")
    assert info.value.reason == reason and info.value.help == tile_subset.HELP
    assert info.value.span == span("ft.load")


def test_simt_ops_are_refused():
    fn = _with("simt.barrier", operands=lambda k: [], types=[])
    with pytest.raises(CompileError, match="SIMT only"):
        run(fn, "subset")


@pytest.mark.parametrize("step_sign, refused", [(1, False), (-1, True), (0, True)])
def test_a_for_loop_needs_a_positive_constant_step(step_sign, refused):
    k = Kernel()
    lo, hi = (k.op("arith.constant", [], [T.INDEX], value=v).result for v in (0, 4))
    body = Region([Value(T.INDEX)])
    k.op("scf.for", [lo, hi, lo], [], step_sign=step_sign).regions.append(body)
    fn = k.function()
    if not refused:
        assert run(fn, "subset") is fn
        return
    with pytest.raises(CompileError, match="tile-kernel loops need a positive constant step"):
        run(fn, "subset")


def test_what_the_subset_lets_through_the_lowering_has_a_rule_for():
    from fearless.backends.tileir.lower import RULES
    from fearless.ir.opdef import REGISTRY
    assert set(REGISTRY) - set(tile_subset.UNSUPPORTED) == set(RULES)


# simplify ---------------------------------------------------------------------------------------

def test_simplify_drops_unused_tile_ops_and_keeps_stores():
    k = Kernel()
    k.load(k.x)                                  # unused
    k.op("tile.dim", [k.x], axis=0)             # unused
    k.op("tile.store", [k.out, k.load(k.x).result])
    fn = run(k.function(), "simplify")
    assert [op.name for op in fn.walk()] == ["tile.block_index", "tile.block_index",
                                             "tile.load", "tile.store"]


# persistent -------------------------------------------------------------------------------------

@pytest.mark.parametrize("single", [False, True])
def test_persistent_loops_the_body_over_the_blocks_tiles_unless_each_block_has_one(single):
    k = Kernel()
    k.op("tile.store", [k.out, k.load(k.x).result])
    fn = k.function()
    scheduled = T.TensorView(F32, 2, T.Role.OUT, (16, 32), schedule=T.Persistent(single=single))
    fn.params[0] = Param("out", scheduled, k.out)
    k.out.type = scheduled
    names = [op.name for op in run(fn, "persistent").walk()]
    assert ("scf.for" in names and "tile.select" in names) is not single
    assert names.count("tile.store") == 1


# memory_order -----------------------------------------------------------------------------------

def test_loads_and_stores_of_a_stored_out_are_ordered_and_the_rest_free():
    k = Kernel()
    first = k.load(k.x)
    k.op("tile.store", [k.out, first.result])
    back = k.op("tile.load_own", [k.out])
    again = k.load(k.out)
    store = k.op("tile.store", [k.out, k.op("arith.add", [back.result, again.result]).result])
    aux = k.op("tile.load_own", [k.aux])  # an Out never stored: nothing to order against
    fn = run(k.function(), "memory_order")
    orders = {id(op): op.attrs.get("order") for op in fn.walk()}
    assert orders[id(first)] is None and orders[id(aux)] is None
    assert orders[id(back)] is orders[id(again)] is Order.AFTER_STORES
    assert orders[id(store)] is Order.AFTER_ALL
    assert "tile.store %out, %5 {order = after_all}" in print_function(fn)


def test_order_inside_loops_and_branches_is_found_too():
    k = Kernel()
    cond = k.op("arith.constant", [], [T.BOOL], value=True).result
    then, other = Region(), Region()
    k.op("scf.if", [cond], []).regions += [then, other]
    with k.b.at(then):
        store = k.op("tile.store", [k.out, k.load(k.x).result])
    with k.b.at(other):
        load = k.op("tile.load_own", [k.out])
    run(k.function(), "memory_order")
    assert store.attrs["order"] is Order.AFTER_ALL and load.attrs["order"] is Order.AFTER_STORES


def test_the_lowering_takes_the_order_from_the_pass():
    k = Kernel()
    k.op("tile.store", [k.out, k.load(k.x).result])
    fn = k.function()
    with pytest.raises(InternalError, match="did not order"):
        lower_tile(fn, (13, 4))
    assert lower_tile(memory_order.run(fn, PassOptions()), (13, 4))[:7] == b"\x7fTileIR"


# in the pipeline --------------------------------------------------------------------------------

def test_run_all_runs_the_verifier_after_each_tile_pass():
    k = Kernel()
    k.op("tile.store", [k.out, k.load(k.x).result])
    seen = []
    run_all(k.function(), PassOptions(), lambda fn: seen.append(fn), TILE_PASSES)
    assert len(seen) == len(TILE_PASSES)


def test_the_verifier_catches_a_pass_that_breaks_the_ir():
    def broken(fn, options):
        fn.body.ops.reverse()  # uses before definitions
        return fn
    k = Kernel()
    k.op("tile.store", [k.out, k.load(k.x).result])
    with pytest.raises(InternalError, match="not defined before use"):
        run_all(k.function(), PassOptions(), verify, (("broken", broken),) + TILE_PASSES)


def test_simplify_is_the_simt_lists_own():
    assert dict(TILE_PASSES)["simplify"] is simplify.run
