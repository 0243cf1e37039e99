"""Golden diagnostics of gathers, scatters, atomics and load paddings: the exact text users see
for each refused form (bad_tile_memory.py), on the CPU backend and on the GPU compile path alike.

What is refused: an atomic on an In or an Out (atomics need an ft.Atomic parameter); a read of
an Atomic (other tile blocks update it meanwhile); a scatter into an In or an Atomic; a scatter
(or a gather of an Out) whose coordinates the compiler cannot prove inside the block's own
tile; atomics of dtypes Tile IR has none for; coordinates that are not integers or not one per
axis; load paddings other than Tile IR's; a kernel with an Atomic tensor but no Out partition.
"""
from __future__ import annotations

import dataclasses
import importlib

import pytest

import fearless as fl
from fearless import f16, f32, i32, u8
from fearless.errors import CompileError, SafetyError
from fearless.runtime import ahead
from tests.errors import bad_tile_memory as bk
from tests.errors.test_diagnostics import INTERNAL

tile_kernel = importlib.import_module("fearless.kernel.base")  # where tile kernels read CONFIG
FILE = bk.__file__

GOLDEN = {
    "atomic_on_an_in": (SafetyError, """\
kernel 'atomic_on_an_in', parameter 'x': 'x' is an In tensor, shared and read-only: it has no \
atomic 'add'
  --> bad_tile_memory.py:14:15
   |
14 |     out.store(x.add(ft.load_like(x, out), 1))
   |               ^^^^^
help: declare the parameter ft.Atomic[i32] and pass a tensor: every tile block may then update \
any element atomically"""),
    "atomic_on_an_out": (SafetyError, """\
kernel 'atomic_on_an_out', parameter 'out': 'out' is an Out partition, written only at this \
tile block's own tile: it has no atomic 'max'
  --> bad_tile_memory.py:19:5
   |
19 |     out.max(ft.load_like(x, out), 1)
   |     ^^^^^^^
help: declare the parameter ft.Atomic[i32] and pass a tensor: every tile block may then update \
any element atomically"""),
    "load_of_an_atomic": (SafetyError, """\
kernel 'load_of_an_atomic', parameter 'hist': 'hist' is an Atomic tensor: other tile blocks \
update it while this one runs, so it cannot be read by ft.load
  --> bad_tile_memory.py:24:23
   |
24 |     out.store(ft.load(hist, (0,), (16,)))
   |                       ^^^^
help: its atomic methods return the values they replace, for example old = hist.add(i, 0)"""),
    "gather_of_an_atomic": (SafetyError, """\
kernel 'gather_of_an_atomic', parameter 'hist': 'hist' is an Atomic tensor: other tile blocks \
update it while this one runs, so it cannot be read by ft.gather
  --> bad_tile_memory.py:29:25
   |
29 |     out.store(ft.gather(hist, ft.load_like(x, out)))
   |                         ^^^^
help: its atomic methods return the values they replace, for example old = hist.add(i, 0)"""),
    "store_to_an_atomic": (SafetyError, """\
kernel 'store_to_an_atomic', parameter 'hist': an Atomic tensor has no 'store': every tile \
block updates it, through its atomic methods only
  --> bad_tile_memory.py:34:5
   |
34 |     hist.store(ft.load_like(x, out))
   |     ^^^^^^^^^^
help: its methods are add, max, min, exchange, compare_exchange"""),
    "scatter_at_data": (SafetyError, """\
kernel 'scatter_at_data', parameter 'out': a scatter into an Out partition must stay inside \
this tile block's own tile, out.tile_index[0] * 16 + [0, 16), and these coordinates are not \
provably inside it: they are any i32 value
  --> bad_tile_memory.py:39:21
   |
39 |     ft.scatter(out, ft.load_like(idx, out), ft.load_like(x, out))
   |                     ^^^^^^^^^^^^^^^^^^^^^^
help: build them as out.tile_index[0] * 16 + an offset from ft.arange, % 16, & 15 or a clamp \
(ft.minimum/ft.maximum); to write anywhere, declare the parameter ft.Atomic[f32] and use its \
exchange or add"""),
    "scatter_one_past": (SafetyError, """\
kernel 'scatter_one_past', parameter 'out': a scatter into an Out partition must stay inside \
this tile block's own tile, out.tile_index[0] * 16 + [0, 16), and these coordinates are not \
provably inside it: they are out.tile_index[0] * 16 + a value in [1, 16]
  --> bad_tile_memory.py:45:21
   |
45 |     ft.scatter(out, out.tile_index[0] * n + ft.arange(n) + 1, ft.load_like(x, out))
   |                     ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
help: build them as out.tile_index[0] * 16 + an offset from ft.arange, % 16, & 15 or a clamp \
(ft.minimum/ft.maximum); to write anywhere, declare the parameter ft.Atomic[f32] and use its \
exchange or add"""),
    "scatter_to_the_next_tile": (SafetyError, """\
kernel 'scatter_to_the_next_tile', parameter 'out': a scatter into an Out partition must stay \
inside this tile block's own tile, out.tile_index[1] * 32 + [0, 32) along axis 1, and these \
coordinates are not provably inside it: they are out.tile_index[1] * 32 + a value in [32, 63]
  --> bad_tile_memory.py:54:21
   |
54 |     ft.scatter(out, (i * bm + r, (j + 1) * bn + c), ft.load_like(x, out))
   |                     ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
help: build them as out.tile_index[1] * 32 + an offset from ft.arange, % 32, & 31 or a clamp \
(ft.minimum/ft.maximum); to write anywhere, declare the parameter ft.Atomic[f32] and use its \
exchange or add"""),
    "scatter_in_a_loop": (SafetyError, """\
kernel 'scatter_in_a_loop', parameter 'out': a scatter into an Out partition must stay inside \
this tile block's own tile, out.tile_index[0] * 16 + [0, 16), and these coordinates are not \
provably inside it: they are any i64 value
  --> bad_tile_memory.py:62:25
   |
62 |         ft.scatter(out, at, ft.load_like(x, out))
   |                         ^^
help: build them as out.tile_index[0] * 16 + an offset from ft.arange, % 16, & 15 or a clamp \
(ft.minimum/ft.maximum); to write anywhere, declare the parameter ft.Atomic[f32] and use its \
exchange or add"""),
    "scatter_into_an_in": (SafetyError, """\
kernel 'scatter_into_an_in', parameter 'x': 'x' is an In tensor, shared and read-only: a \
kernel does not write it
  --> bad_tile_memory.py:68:16
   |
68 |     ft.scatter(x, ft.arange(16), 1.0)
   |                ^
help: declare the parameter ft.Out[T] to write its own tile, or ft.Atomic[T] to update any \
element atomically"""),
    "gather_another_tile": (SafetyError, """\
kernel 'gather_another_tile', parameter 'out': a gather from an Out partition must stay inside \
this tile block's own tile, out.tile_index[0] * 16 + [0, 16), and these coordinates are not \
provably inside it: they are a value in [0, 15]
  --> bad_tile_memory.py:76:30
   |
76 |     out.store(ft.gather(out, ft.arange(n)))
   |                              ^^^^^^^^^^^^
help: build them as out.tile_index[0] * 16 + an offset from ft.arange, % 16, & 15 or a clamp \
(ft.minimum/ft.maximum); other tiles of an output belong to other tile blocks"""),
    "narrow_atomic_add": (CompileError, """\
kernel 'narrow_atomic_add', parameter 'counts': Tile IR has no atomic add of u8 elements
  --> bad_tile_memory.py:81:15
   |
81 |     out.store(counts.add(ft.load_like(x, out), 1))
   |               ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
help: atomics take i32, i64, u32, u64, f16, bf16, f32, f64"""),
    "half_atomic_max": (CompileError, """\
kernel 'half_atomic_max', parameter 'best': Tile IR has no atomic max of f16 elements
  --> bad_tile_memory.py:86:15
   |
86 |     out.store(best.max(ft.load_like(x, out), ft.load_like(v, out)))
   |               ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
help: atomics take i32, i64, u32, u64, f32, f64"""),
    "float_coordinates": (CompileError, """\
kernel 'float_coordinates', parameter 'x': coordinates must be integers, got tile<16xf32>
  --> bad_tile_memory.py:91:28
   |
91 |     out.store(ft.gather(x, ft.load_like(at, out)))
   |                            ^^^^^^^^^^^^^^^^^^^^^
help: convert them with .astype(fl.i32)"""),
    "one_coordinate_for_2d": (CompileError, """\
kernel 'one_coordinate_for_2d', parameter 'x': 'x' is 2-d: it takes 2 coordinates, got 1
  --> bad_tile_memory.py:96:28
   |
96 |     out.store(ft.gather(x, ft.arange(16).reshape((4, 4))))
   |                            ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
help: give one integer tile per axis, as a tuple: (rows, cols)"""),
    "pad_with_one_and_a_half": (CompileError, """\
kernel 'pad_with_one_and_a_half', parameter 'x': a load pads with 0, -0.0, math.nan, math.inf \
or -math.inf, not 1.5
   --> bad_tile_memory.py:101:66
    |
101 |     out.store(ft.load(x, out.tile_index, out.tile_shape, padding=1.5))
    |                                                                  ^^^
help: Tile IR pads a tile with one of these values; for another, gather with ft.gather(x, \
indices, padding=...) or choose with ft.where"""),
    "pad_ints_with_inf": (CompileError, """\
kernel 'pad_ints_with_inf', parameter 'x': i32 tensors pad only with 0, not -inf
   --> bad_tile_memory.py:106:44
    |
106 |     out.store(ft.load_like(x, out, padding=-math.inf))
    |                                            ^^^^^^^^^
help: infinities, NaN and -0.0 are float values"""),
    "pad_with_a_variable": (CompileError, """\
kernel 'pad_with_a_variable', parameter 'x': padding must be a constant: 0, -0.0, math.nan, \
math.inf or -math.inf
   --> bad_tile_memory.py:111:44
    |
111 |     out.store(ft.load_like(x, out, padding=p))
    |                                            ^
help: Tile IR pads a tile with one of these values"""),
    "only_an_atomic": (CompileError, """\
kernel 'only_an_atomic': a tile kernel needs an ft.Out parameter: its partition gives the grid
   --> bad_tile_memory.py:115:1
    |
115 | def only_an_atomic(hist: ft.Atomic[i32], x: ft.In[i32]):
    | ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
help: an ft.Atomic tensor gives no grid: also pass an Out partition (for example of per-tile \
results)"""),
}


def _out(dt=f32):
    return fl.zeros(64, dt).partition(16)


ARGS = {  # arguments of each kernel: 1-d tensors of 64 elements in tiles of 16
    "atomic_on_an_in": lambda: [_out(i32), fl.zeros(64, i32)],
    "atomic_on_an_out": lambda: [_out(i32), fl.zeros(64, i32)],
    "load_of_an_atomic": lambda: [_out(i32), fl.zeros(64, i32)],
    "gather_of_an_atomic": lambda: [_out(i32), fl.zeros(64, i32), fl.zeros(64, i32)],
    "store_to_an_atomic": lambda: [_out(i32), fl.zeros(64, i32), fl.zeros(64, i32)],
    "scatter_at_data": lambda: [_out(), fl.zeros(64, i32), fl.zeros(64)],
    "scatter_one_past": lambda: [_out(), fl.zeros(64)],
    "scatter_to_the_next_tile": lambda: [fl.zeros((32, 64)).partition((16, 32)),
                                         fl.zeros((32, 64))],
    "scatter_in_a_loop": lambda: [_out(), fl.zeros(64)],
    "scatter_into_an_in": lambda: [_out(), fl.zeros(64)],
    "gather_another_tile": lambda: [_out(), fl.zeros(64)],
    "narrow_atomic_add": lambda: [_out(u8), fl.zeros(64, u8), fl.zeros(64, i32)],
    "half_atomic_max": lambda: [_out(f16), fl.zeros(64, f16), fl.zeros(64, i32),
                                fl.zeros(64, f16)],
    "float_coordinates": lambda: [_out(), fl.zeros(64), fl.zeros(64)],
    "one_coordinate_for_2d": lambda: [fl.zeros((4, 16)).partition((4, 4)), fl.zeros((4, 16))],
    "pad_with_one_and_a_half": lambda: [_out(), fl.zeros(64)],
    "pad_ints_with_inf": lambda: [_out(i32), fl.zeros(64, i32)],
    "pad_with_a_variable": lambda: [_out(), fl.zeros(64), 1.0],
    "only_an_atomic": lambda: [fl.zeros(64, i32), fl.zeros(64, i32)],
}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_each_refused_form_says_why_and_points_at_it(name):
    cls, text = GOLDEN[name]
    with pytest.raises(cls) as info:
        getattr(bk, name)(*ARGS[name]())
    err = info.value
    assert type(err) is cls
    assert str(err).replace(FILE, "bad_tile_memory.py") == text
    assert not INTERNAL.search(str(err))
    assert err.kernel == name and err.span is not None and err.span.filename == FILE


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_the_gpu_compile_path_refuses_with_the_same_text(name, tmp_path, monkeypatch):
    monkeypatch.setattr(tile_kernel, "CONFIG",
                        dataclasses.replace(tile_kernel.CONFIG, cache_dir=tmp_path / "cache"))
    cls, text = GOLDEN[name]
    with ahead.compile_only(["sm_80"]), pytest.raises(cls) as info:
        getattr(bk, name)(*ARGS[name]())  # what `fearless compile --arch sm_80` runs
    assert str(info.value).replace(FILE, "bad_tile_memory.py") == text


def test_the_refusals_cover_both_error_kinds():
    kinds = {cls for cls, _ in GOLDEN.values()}
    assert kinds == {SafetyError, CompileError}
