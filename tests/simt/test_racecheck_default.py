"""The cpu backend's race detector is on unless ``FEARLESS_RACECHECK=0``: the cpu backend is
where kernels are developed, so an ``UnsafeSlice`` race must not pass silently there.

The scripts run in a fresh process with the variable removed from the environment (the suite's
own process may have it set either way).
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fearless.config import Config

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import numpy as np
    import fearless as fl
    fl.set_backend("cpu")

    @fl.kernel
    def scatter(idx: fl.Slice[fl.i32], x: fl.Slice[fl.f32], out: fl.UnsafeSlice[fl.f32]):
        i = fl.thread.index_1d()
        if i < len(idx):
            with fl.unsafe():
                out[idx[i]] = x[i]

    idx = fl.asarray(np.arange(64, dtype=np.int32) % 8)  # eight threads write each element
    out = fl.zeros(8)
    scatter[scatter.prepare(64, block=32)](idx, fl.asarray(np.ones(64, np.float32)), out)
    print(out.numpy().tolist())
""")


@pytest.mark.parametrize("env, on", [({}, True), ({"FEARLESS_RACECHECK": ""}, True),
                                     ({"FEARLESS_RACECHECK": "1"}, True),
                                     ({"FEARLESS_RACECHECK": "0"}, False)])
def test_the_race_detector_is_on_unless_turned_off(env, on):
    assert Config.from_env(env).racecheck is on


@pytest.mark.parametrize("value, caught", [(None, True), ("0", False)])
def test_an_unsafe_slice_race_is_caught_by_default(tmp_path, value, caught):
    env = {k: v for k, v in os.environ.items() if k != "FEARLESS_RACECHECK"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    env["FEARLESS_CACHE_DIR"] = str(tmp_path / "cache")
    if value is not None:
        env["FEARLESS_RACECHECK"] = value
    (tmp_path / "race.py").write_text(SCRIPT)
    run = subprocess.run([sys.executable, "race.py"], cwd=tmp_path, env=env, text=True,
                         capture_output=True, timeout=300)
    if caught:
        assert run.returncode != 0
        assert "RaceError: kernel 'scatter'" in run.stderr and "data race on 'out'" in \
            run.stderr, run.stderr
    else:
        assert run.returncode == 0, run.stderr
        assert run.stdout.strip() == str([1.0] * 8)  # the race passes unnoticed
