"""IR built by hand: the verifier, the printer, the passes, and backend coverage of every op."""
from __future__ import annotations

import pytest

from fearless import dtypes
from fearless.backends.cpu import simt as cpu_simt, tile as cpu_tile
from fearless.backends.llvm import lower as llvm
from fearless.backends.tileir import lower as tileir
from fearless.errors import InternalError, SafetyError
from fearless.ir import types as T
from fearless.ir.core import Builder, Function, Param, Region, Value
from fearless.ir.opdef import REGISTRY, checked_reads, only
from fearless.ir.printer import print_function
from fearless.ir.verify import verify
from fearless.passes import SIMT_PASSES, PassOptions, run_all

F32 = T.Scalar(dtypes.f32)


def kernel(store_index: str):
    """out[idx] = x[tid] with idx the thread index itself, or tid + 1 (``store_index``)."""
    x = Value(T.Array(dtypes.f32, 1, T.Access.READ, True), "x")
    out = Value(T.Array(dtypes.f32, 1, T.Access.DISJOINT, True), "out")
    body = Region()
    b = Builder(body)
    tid = b.create("simt.thread_index", [], [T.ThreadIndex(1, 0)], {"space": 1, "axis": 0}).result
    i = b.create("simt.index_value", [tid], [T.INDEX]).result
    v = b.create("mem.load", [x, i], [F32], {"checked": False}).result
    if store_index == "own":
        idx = tid
    else:
        one = b.create("arith.constant", [], [T.INDEX], {"value": 1}).result
        idx = b.create("arith.add", [i, one], [T.INDEX]).result
    b.create("mem.store", [out, idx, v], [])
    return Function("k", [Param("x", x.type, x), Param("out", out.type, out)], body)


@pytest.mark.parametrize("backend", [cpu_simt, cpu_tile, llvm, tileir],
                         ids=lambda m: m.__name__)
def test_every_op_has_a_rule_or_a_reason_in_every_backend(backend):
    covered = set(backend.RULES) | set(backend.UNSUPPORTED)
    assert set(REGISTRY) == covered, set(REGISTRY) ^ covered
    assert not set(backend.RULES) & set(backend.UNSUPPORTED)
    assert all(backend.UNSUPPORTED.values())


@pytest.mark.parametrize("backend, other", [(cpu_simt, "tile"), (llvm, "tile"),
                                            (cpu_tile, "simt"), (tileir, "simt")],
                         ids=lambda x: getattr(x, "__name__", x))
def test_each_backend_refuses_the_other_tracks_ops_and_has_rules_for_its_own(backend, other):
    assert set(only(other)) <= set(backend.UNSUPPORTED)
    mine = "simt" if other == "tile" else "tile"
    assert set(only(mine)) <= set(backend.RULES)


def test_the_bounds_pass_checks_exactly_the_reads_of_user_memory():
    assert checked_reads() == {"mem.load", "mem.atomic", "warp.ldmatrix", "mem.async_copy"}
    assert all(REGISTRY[name].track == "simt" for name in checked_reads())


def test_printer_is_stable_text():
    text = print_function(verify(kernel("own")))
    assert text == print_function(kernel("own"))
    assert text.splitlines()[0] == ("kernel @k(%x: array<f32, 1d, read>, "
                                    "%out: array<f32, 1d, disjoint>) {")
    assert "mem.store %out, %0, %2" in text


def test_verifier_rejects_type_errors_and_undefined_operands():
    fn = kernel("own")
    fn.body.ops[2].results[0].type = T.Scalar(dtypes.f64)  # load result no longer the element
    with pytest.raises(InternalError,
                       match=r"result types \['f64'\] are not the op's rule's \['f32'\]"):
        verify(fn)
    fn = kernel("own")
    fn.body.ops[1].operands.append(fn.body.ops[1].operands[0])  # index_value of two values
    with pytest.raises(InternalError, match="simt.index_value.*has 2 operands, expects 1"):
        verify(fn)
    fn = kernel("own")
    fn.body.ops.insert(0, fn.body.ops.pop(1))  # use before definition
    with pytest.raises(InternalError, match="not defined before use"):
        verify(fn)
    fn = kernel("own")
    Builder(fn.body).create("cf.break", [], [])
    with pytest.raises(InternalError, match="outside a loop"):
        verify(fn)


def test_passes_accept_the_own_index_and_refuse_a_computed_one():
    fn = run_all(kernel("own"), PassOptions(), verify)
    assert fn.attrs["index_space"] == 1
    (load,) = [op for op in fn.walk() if op.name == "mem.load"]
    # x[tid], unguarded: in bounds once the host checks len(x) >= the launch's threads
    assert load.attrs == {"checked": False, "proved": True, "site": 1}
    assert fn.attrs["bounds_preconditions"] == (("x", 0, "<threads>", 0),)
    assert fn.attrs["bounds_sites"] == (("x", None),)
    fn = run_all(kernel("own"), PassOptions(prove_bounds=False), verify)
    (load,) = [op for op in fn.walk() if op.name == "mem.load"]
    assert load.attrs == {"checked": True, "site": 1}
    with pytest.raises(SafetyError, match="own index"):
        run_all(kernel("shifted"), PassOptions(), verify)


def test_unchecked_kernels_get_no_bounds_sites():
    fn = run_all(kernel("own"), PassOptions(bounds_checks=False), verify)
    assert fn.attrs["bounds_sites"] == ()
    assert all(not op.attrs["checked"] for op in fn.walk() if op.name == "mem.load")


def test_pass_list_is_the_documented_order():
    assert [name for name, _ in SIMT_PASSES] == ["access", "disjoint", "barriers", "warps",
                                                 "shared", "contract", "simplify", "bounds",
                                                 "inbounds"]


def _constant_kernel(dtype, value):
    body = Region()
    Builder(body).create("arith.constant", [], [T.Scalar(dtype)], {"value": value})
    return Function("k", [], body)


@pytest.mark.parametrize("dtype, value, why", [
    (dtypes.f16, 1099511627776.0, "not a f16 value"),      # past f16's range: inf
    (dtypes.bf16, 1.0039062500000002, "not a bf16 value"),  # between two bf16 values
    (dtypes.i8, 300, "does not fit i8"),
    (dtypes.u64, -2, "does not fit u64"),
    (dtypes.f32, 1, "not a Python float"),
    (dtypes.bool_, 1, "not a Python bool"),
])
def test_a_constant_holds_exactly_a_value_of_its_dtype(dtype, value, why):
    # every backend emits the value as is (an LLVM half constant cannot hold 1e12 at all)
    with pytest.raises(InternalError, match=why):
        verify(_constant_kernel(dtype, value))
    verify(_constant_kernel(dtype, float(dtypes.cast(value, dtype)) if dtype.is_float else
                            (True if dtype.is_bool else 7)))
