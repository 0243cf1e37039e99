"""The one parameter model (kernel/params.py): both tracks read their annotations into it, and a
call's arguments and the command line's ``--signature`` specialise a kernel to the same IR
types, with the same refusals."""
from __future__ import annotations

from typing import TypeVar

import numpy as np
import pytest

import fearless as fl
from fearless import cli, f32, f64, i32, i64, targets
from fearless import tile as ft
from fearless.errors import ArgumentTypeError, CompileError, ContractError
from fearless.ir import types as T
from fearless.kernel import params as P

Tv = TypeVar("Tv")
rng = np.random.default_rng(3)


@fl.kernel
def mixed(a, x: fl.Slice[Tv], m: fl.Array[Tv, 2], k: fl.i32, out: fl.DisjointSlice[Tv]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = x[i] * a + m[0, k]


@ft.kernel
def scaled(z: ft.Out[Tv], x: ft.In[Tv], s, rows: i32, bk: ft.Const[int] = 16):
    z.store(ft.load_like(x, z) * s)


def _call_types(kernel) -> tuple:
    """The IR types the one specialisation launched so far has (the call path's)."""
    (entry,) = kernel._entries.values()
    return entry.types


def test_simt_call_and_command_line_specialise_alike():
    x = fl.asarray(rng.standard_normal(64).astype(np.float32))
    m = fl.asarray(rng.standard_normal((2, 8)).astype(np.float32))
    out = fl.full(64, np.nan, f32)
    mixed[mixed.prepare(64)](np.float32(0.5), x, m, 3, out)
    want = x.numpy().astype(np.float64) * 0.5 + m.numpy()[0, 3]
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-6)
    by_call = _call_types(mixed)
    by_cli = cli.param_types(mixed, targets.parse_signature("a=f32,x=f32"))
    assert by_cli == by_call == (T.Scalar(f32), T.Array(f32, 1, T.Access.READ, True),
                                 T.Array(f32, 2, T.Access.READ, True), T.Scalar(i32),
                                 T.Array(f32, 1, T.Access.DISJOINT, True))


def test_tile_call_and_command_line_specialise_alike():
    z = fl.zeros((64, 32)).partition((16, 32))
    x = fl.asarray(rng.standard_normal((64, 32)).astype(np.float32))
    values = P.bind(scaled.name, scaled.params, (z, x, 1.5, 7), {})
    by_call, _, constants, _, grid = scaled._signature(values, "cpu", ahead=True)
    assert constants == {"bk": 16} and grid == (4, 1, 1)
    by_cli = cli.param_types(scaled, targets.parse_signature("z=f32:2/16x32,x=f32:2,s=f32"))
    layout = T.Layout(16, (16, 16), (16, 1), True)
    assert by_cli == by_call == (T.TensorView(f32, 2, T.Role.OUT, (16, 32), layout),
                                 T.TensorView(f32, 2, T.Role.IN, None, layout),
                                 T.Scalar(f32), T.Scalar(i32))


def test_the_command_line_is_refused_as_a_call_is():
    sig = targets.parse_signature("a=f32,x=f32,m=f64:2")
    with pytest.raises(ArgumentTypeError) as by_cli:
        cli.param_types(mixed, sig)
    with pytest.raises(ArgumentTypeError) as by_call:
        mixed[mixed.prepare(8)](np.float32(1), fl.zeros(8), fl.zeros((2, 2), f64), 0,
                                fl.zeros(8))
    assert str(by_cli.value) == str(by_call.value) == (
        "kernel 'mixed', parameter 'm': has dtype f64, but 'x' already bound Tv to f32")
    with pytest.raises(ContractError, match=r"tile shape \(16, 24\) has an extent that is not "
                                            r"a power of two"):
        cli.param_types(scaled, targets.parse_signature("z=f32:2/16x24,x=f32:2,s=f32"))
    with pytest.raises(ArgumentTypeError, match="parameter 'x': expects a 1-d array, got 2-d"):
        cli.param_types(mixed, targets.parse_signature("a=f32,x=f32:2"))


def test_typevars_bind_from_arrays_before_python_scalars_on_both_tracks():
    simt = [P.Param("a", P.SCALAR, Tv), P.Param("x", P.ARRAY, Tv, 1, T.Access.READ, "Slice")]
    types = P.specialise("k", simt, [P.scalar_info(2, "simt"), P.ArgInfo(f32, 1)])
    assert types == (T.Scalar(f32), T.Array(f32, 1, T.Access.READ, True))
    infos = [P.scalar_info(2, "simt"), P.ArgInfo(f64, 1), P.ArgInfo(f64, 2),
             P.scalar_info(1, "simt"), P.ArgInfo(f64, 1)]
    types = P.specialise("mixed", mixed.params, infos)
    assert types[0] == T.Scalar(i64) and types[3] == T.Scalar(i32)  # declared i32: converts
    tile = scaled.runtime_params
    infos = [P.ArgInfo(f64, 1, tile_shape=(8,)), P.ArgInfo(f64, 1), P.scalar_info(2.0, "tile"),
             P.scalar_info(3, "tile")]
    assert P.specialise("scaled", tile, infos)[2:] == (T.Scalar(f32), T.Scalar(i32))
    tile = [P.Param("s", P.SCALAR, Tv), P.Param("z", P.OUT, Tv)]
    infos = [P.scalar_info(2.0, "tile"), P.ArgInfo(f64, 1, tile_shape=(8,))]
    assert P.specialise("k", tile, infos)[0] == T.Scalar(f64)
    # a NumPy scalar is not weak: it binds, or must match
    infos[0] = P.scalar_info(np.float32(2), "tile")
    with pytest.raises(ArgumentTypeError, match="parameter 'z': has dtype f64, but 's' already "
                                                "bound Tv to f32"):
        P.specialise("k", tile, infos)


@pytest.mark.parametrize("value,want", [(2.0, f32), (2, i32), (2**31, i64), (-2**31, i32),
                                        (True, fl.bool_), (np.float64(2), f64)])
def test_an_unannotated_tile_scalar_takes_tritons_dtypes(value, want):
    assert P.scalar_info(value, "tile").dtype is want


def test_the_tracks_read_their_own_annotations():
    kinds = [(p.name, p.kind, p.dtype, p.ndim, p.access, p.written) for p in mixed.params]
    assert kinds == [("a", P.ANY, None, None, None, False),
                     ("x", P.ARRAY, Tv, 1, T.Access.READ, False),
                     ("m", P.ARRAY, Tv, 2, T.Access.READ, False),
                     ("k", P.SCALAR, i32, None, None, False),
                     ("out", P.ARRAY, Tv, 1, T.Access.DISJOINT, True)]
    kinds = [(p.name, p.kind, p.dtype, p.default, p.written) for p in scaled.params]
    assert kinds == [("z", P.OUT, Tv, P.NO_DEFAULT, True), ("x", P.IN, Tv, P.NO_DEFAULT, False),
                     ("s", P.SCALAR, None, P.NO_DEFAULT, False),
                     ("rows", P.SCALAR, i32, P.NO_DEFAULT, False),
                     ("bk", P.CONST, int, 16, False)]
    assert [p.name for p in scaled.runtime_params] == ["z", "x", "s", "rows"]


def test_each_track_refuses_the_others_annotations():
    @ft.kernel
    def slice_in_tile(z: ft.Out[f32], x: fl.Slice[f32]):
        z.store(ft.load_like(x, z))

    with pytest.raises(CompileError, match=r"annotation fearless.Slice\[f32, 1\] is not a "
                                           r"tile-kernel parameter kind"):
        slice_in_tile.params

    @fl.kernel
    def out_in_simt(z: ft.Out[f32]):
        pass

    with pytest.raises(CompileError, match=r"is not a parameter kind") as info:
        out_in_simt.params
    assert info.value.param == "z" and info.value.span is not None
