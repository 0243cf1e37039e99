"""Golden diagnostics of tile kernels: the exact text users see for each refused read of an output.

A tile block may read only its own tile of an ``ft.Out`` partition: any other tile belongs to
another tile block, which may be writing it meanwhile (a race that Tile IR's memory tokens cannot
order: they order one block's own operations). The refusal happens while the kernel is compiled,
before any backend is involved, so the CPU backend and the GPU compile path refuse alike.
"""
from __future__ import annotations

import importlib
import dataclasses

import pytest

import fearless as fl
tile_kernel = importlib.import_module("fearless.kernel.base")  # where tile kernels read CONFIG
from fearless.errors import CompileError, SafetyError
from fearless.runtime import ahead
from tests.errors import bad_tile_kernels as bk
from tests.errors.test_diagnostics import INTERNAL

FILE = bk.__file__
HELP = ("help: use {}.load() to read this block's own tile; other tiles of an output belong to "
        "other tile blocks")
HEAD = "an Out partition may be read only at this tile block's own tile, and"

GOLDEN = {
    "neighbour_tile": f"""\
kernel 'neighbour_tile', parameter 'out': {HEAD} this position is not provably out.tile_index
  --> bad_tile_kernels.py:14:28
   |
14 |     out.store(ft.load(out, (i, j + 1), out.tile_shape))
   |                            ^^^^^^^^^^
{HELP.format("out")}""",
    "part_of_a_tile": f"""\
kernel 'part_of_a_tile', parameter 'out': {HEAD} this shape (8, 32) is not its tile shape (16, 32)
  --> bad_tile_kernels.py:20:41
   |
20 |     half = ft.load(out, out.tile_index, (8, 32))
   |                                         ^^^^^^^
{HELP.format("out")}""",
    "load_like_other_shape": f"""\
kernel 'load_like_other_shape', parameter 'small': {HEAD} this read takes the tile shape \
(16, 32) of 'out', not its own (8, 16)
  --> bad_tile_kernels.py:26:38
   |
26 |     out.store(ft.load_like(x, out) + ft.load_like(small, out))
   |                                      ^^^^^^^^^^^^^^^^^^^^^^^^
{HELP.format("small")}""",
    "neighbour_in_helper": f"""\
kernel 'neighbour_in_helper', parameter 'out': {HEAD} this position is not provably o.tile_index
  --> bad_tile_kernels.py:32:23
   |
32 |     return ft.load(o, (i, j + 1), o.tile_shape)
   |                       ^^^^^^^^^^
{HELP.format("o")}""",
}


def _args(name):
    """Arguments of a 2 x 2 grid of (16, 32) tiles; ``small`` gives the same grid of (8, 16)."""
    out = fl.zeros((32, 64)).partition((16, 32))
    if name == "load_like_other_shape":
        return [out, fl.zeros((16, 32)).partition((8, 16)), fl.zeros((32, 64))]
    return [out, fl.zeros((32, 64))]


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_reading_another_tile_of_an_output_is_refused(name):
    kernel = getattr(bk, name)
    with pytest.raises(SafetyError) as info:
        kernel(*_args(name))
    err = info.value
    assert str(err).replace(FILE, "bad_tile_kernels.py") == GOLDEN[name]
    assert not INTERNAL.search(str(err))
    assert err.kernel == name and err.span is not None and err.span.filename == FILE


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_the_gpu_compile_path_refuses_with_the_same_text(name, tmp_path, monkeypatch):
    monkeypatch.setattr(tile_kernel, "CONFIG",
                        dataclasses.replace(tile_kernel.CONFIG, cache_dir=tmp_path / "cache"))
    with ahead.compile_only(["sm_90"]), pytest.raises(SafetyError) as info:
        getattr(bk, name)(*_args(name))  # what `fearless compile --arch sm_90` runs
    assert str(info.value).replace(FILE, "bad_tile_kernels.py") == GOLDEN[name]


TRUTH = ("help: reduce it to one value first (for a bool tile c, ft.max(c) is whether any element "
         "is True, ft.min(c) whether all are), or choose per element with ft.where")

CONDITIONS = {  # a branch or loop needs one value for the whole tile block
    "while_on_a_tile": f"""\
kernel 'while_on_a_tile': a tile has no single truth value: the elements of this \
tile<16x32xbool> may differ
  --> bad_tile_kernels.py:44:11
   |
44 |     while t > 1.0:
   |           ^^^^^^^
{TRUTH}""",
    "if_on_a_tile": f"""\
kernel 'if_on_a_tile': a tile has no single truth value: the elements of this tile<16xbool> \
may differ
  --> bad_tile_kernels.py:52:8
   |
52 |     if t.max(1) > 0 and t.min() < 0:
   |        ^^^^^^^^^^^^
{TRUTH}""",
}


@pytest.mark.parametrize("name", sorted(CONDITIONS))
def test_a_condition_on_a_tile_is_refused(name):
    with pytest.raises(CompileError) as info:
        getattr(bk, name)(*_args(name))
    err = info.value
    assert str(err).replace(FILE, "bad_tile_kernels.py") == CONDITIONS[name]
    assert not INTERNAL.search(str(err))
