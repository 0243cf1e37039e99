"""The own-tile proof of ``ft.scatter`` (passes/own_tile.py over analysis/tile_ranges.py): which
coordinate expressions it accepts as inside the block's own tile, and which it refuses.

Each case is one kernel body over ``out: ft.Out[f32]`` in tiles of ``n`` = 64 (``base`` =
``out.tile_index[0] * n``; ``d`` an i32 data tile). An accepted kernel also runs on the CPU
backend over random data, whose scatter rule checks each coordinate against the block's own
tile (an InternalError otherwise), so a wrong proof cannot pass unnoticed.
"""
from __future__ import annotations

import sys
import textwrap

import numpy as np
import pytest

import fearless as fl
from fearless import config, f32, i32
from fearless.errors import SafetyError
from tests.support import import_source

HEAD = """
import fearless as fl
from fearless import f32, i32, i8
from fearless import tile as ft

@ft.kernel
def k(out: ft.Out[f32], data: ft.In[i32]):
    n = out.tile_shape[0]
    base = out.tile_index[0] * n
    d = ft.load_like(data, out)
    r = ft.arange(n)
"""

ACCEPTED = {
    "offset": "ft.scatter(out, base + r, 1.0)",
    "reversed": "ft.scatter(out, base + (n - 1 - r), 1.0)",
    "base last": "ft.scatter(out, r + out.tile_index[0] * 64, 1.0)",
    "modulo": "ft.scatter(out, base + (d * 7 + 3) % n, 1.0)",
    "mask": "ft.scatter(out, base + (d & (n - 1)), 1.0)",
    "smaller mask": "ft.scatter(out, base + (r & 15), 1.0)",
    "halves": "ft.scatter(out, base + (r // 2), 1.0)",
    "clamp": "ft.scatter(out, ft.minimum(ft.maximum(base + d, base), base + n - 1), 1.0)",
    "clamp of the offset": "ft.scatter(out, base + ft.minimum(ft.maximum(d, 0), n - 1), 1.0)",
    "where": "ft.scatter(out, ft.where(d > 0, base + r, base), 1.0)",
    "scalar in a loop": "for j in range(n):\n    ft.scatter(out, base + j, 2.0)",
    "loop from the base": "for j in range(base, base + n):\n    ft.scatter(out, j, 2.0)",
    "variable assigned twice": "at = base + r\nif d.max() > 0:\n    at = base + n - 1 - r\n"
                               "ft.scatter(out, at, 1.0)",
    "i32 offset": "ft.scatter(out, base + (r * 3 % n).astype(i32), 1.0)",
    "tile maximum": "ft.scatter(out, base + ft.max(r), 1.0)",
    "assigned in both branches": "if d.max() > 0:\n    at = base + r\nelse:\n"
                                 "    at = base + n - 1 - r\nft.scatter(out, at, 1.0)",
    "loop-carried modulo": "at = base + r\nfor j in range(2):\n    ft.scatter(out, at, 1.0)\n"
                           "    at = base + (at + 1) % n",
}

REFUSED = {
    "data": ("ft.scatter(out, d, 1.0)", "any i32 value"),
    "too wide": ("ft.scatter(out, base + r * 2, 1.0)", "out.tile_index[0] * 64 + a value in "
                                                       "[0, 126]"),
    "negative": ("ft.scatter(out, base + r - 1, 1.0)", "out.tile_index[0] * 64 + a value in "
                                                       "[-1, 62]"),
    "other block": ("ft.scatter(out, r, 1.0)", "a value in [0, 63]"),
    "double base": ("ft.scatter(out, base * 2 + r, 1.0)", "out.tile_index[0] * 128 + a value "
                                                          "in [0, 63]"),
    "one-sided clamp": ("ft.scatter(out, ft.maximum(base + d, base), 1.0)",
                        "out.tile_index[0] * 64 + a value in [0, 2147483647]"),
    "loop one too far": ("for j in range(n + 1):\n    ft.scatter(out, base + j, 2.0)",
                         "out.tile_index[0] * 64 + a value in [0, 64]"),
    "narrowed": ("ft.scatter(out, (base + r).astype(i8), 1.0)", "any i8 value"),
    "loop-carried": ("at = base + r\nfor j in range(2):\n    ft.scatter(out, at, 1.0)\n"
                     "    at = at + 1", "any i64 value"),
    # a variable read where it may not be assigned holds its slot's initial 0 (element 0: the
    # first block's), which the CPU backend's own-tile check caught before this rule existed
    "assigned in one branch": ("if d.max() > 0:\n    at = base + r\nft.scatter(out, at, 1.0)",
                               "any i64 value"),
}


def _kernel(tmp_path, body: str, name: str):
    src = HEAD + textwrap.indent(body, "    ") + "\n"
    path = tmp_path / f"{name}.py"
    path.write_text(src)
    return import_source(path, name).k


@pytest.mark.parametrize("case", sorted(ACCEPTED))
def test_accepted_coordinates_write_only_the_own_tile(case, tmp_path, monkeypatch):
    # random data repeats coordinates (a race the detector would report): only the tiles matter
    monkeypatch.setattr(sys.modules["fearless.kernel.base"], "CONFIG",
                        config.Config.from_env({"FEARLESS_RACECHECK": "0"}))
    kernel = _kernel(tmp_path, ACCEPTED[case], f"accepted_{case.replace(' ', '_')}")
    n, size = 64, 200  # a partial last tile: coordinates past the edge write nothing
    data = np.random.default_rng(1).integers(-1000, 1000, size).astype(np.int32)
    out, _ = kernel(fl.full(size, np.nan, f32).partition(n), fl.asarray(data)).sync()
    got = out.unpartition().numpy()
    assert set(np.unique(got[~np.isnan(got)])) <= {1.0, 2.0} and not np.isnan(got).all()


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused_coordinates_say_what_the_compiler_knows(case, tmp_path):
    body, known = REFUSED[case]
    kernel = _kernel(tmp_path, body, f"refused_{case.replace(' ', '_').replace('-', '_')}")
    with pytest.raises(SafetyError) as info:
        kernel(fl.zeros(128).partition(64), fl.zeros(128, i32))
    text = str(info.value)
    assert f"these coordinates are not provably inside it: they are {known}\n" in text
    assert "ft.scatter(out," in text and "^" in text
