"""FEARLESS_DUMP: the compile stages it names are printed to stderr as each kernel compiles."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fearless import compiler
from fearless.config import DUMP_STAGES, Config

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = textwrap.dedent("""
    import numpy as np
    import fearless as fl
    from fearless import tile as ft

    @fl.kernel
    def twice(x: fl.Slice[fl.f32], out: fl.DisjointSlice[fl.f32]):
        i = fl.thread.index_1d()
        if i < len(out):
            out[i] = x[i] * 2.0

    @ft.kernel
    def plus_one(o: ft.Out[fl.f32], x: ft.In[fl.f32]):
        o.store(ft.load_like(x, o) + 1.0)

    fl.set_backend("cpu")
    x = np.arange(8, dtype=np.float32)
    out = fl.zeros(8)
    twice[twice.prepare(8)](fl.asarray(x), out)
    o, _ = plus_one(fl.zeros(8).partition(4), fl.asarray(x)).sync()
    print(out.numpy().tolist(), o.unpartition().numpy().tolist())
    """)


def _run(tmp_path, **env):
    script = tmp_path / "dumped.py"
    script.write_text(SCRIPT)
    full = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "FEARLESS_CACHE_DIR":
            str(tmp_path / "cache"), "FEARLESS_CROSS_COMPILE": "", **env}
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=full, timeout=300)


def test_the_named_stages_of_both_tracks_are_printed_as_they_compile(tmp_path):
    proc = _run(tmp_path, FEARLESS_DUMP="ir,passes")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str([2.0 * k for k in range(8)]) + " " + \
        str([1.0 + k for k in range(8)])
    err = proc.stderr
    assert "// fearless: kernel 'twice', stage ir, for cpu\nkernel @twice(" in err
    assert "// fearless: kernel 'twice', stage passes, for cpu\nkernel @twice(" in err
    assert "// fearless: kernel 'plus_one', stage ir, for cpu\n" in err
    assert "mem.store" in err and "tile.store" in err
    assert "stage llvm" not in err and "stage ast" not in err


def test_a_compile_the_disk_cache_answers_prints_nothing(tmp_path):
    assert "stage ir" in _run(tmp_path, FEARLESS_DUMP="ir").stderr
    assert "stage ir" not in _run(tmp_path, FEARLESS_DUMP="ir").stderr


def test_a_stage_name_that_does_not_exist_is_refused():
    with pytest.raises(ValueError, match="'lvm' is not a stage; stages: ast, types, ir, passes"):
        Config.from_env({"FEARLESS_DUMP": "ir,lvm"})
    assert Config.from_env({"FEARLESS_DUMP": " ptx , ir"}).dump == {"ptx", "ir"}


def test_the_stage_names_are_the_compilers():
    assert set(DUMP_STAGES) == set(compiler.STAGE_NAMES) | set(compiler.TILE_STAGE_NAMES)
