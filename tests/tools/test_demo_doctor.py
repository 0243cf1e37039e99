"""``fearless demo`` and ``fearless doctor`` as a new user meets them.

The demo's picture must not land in a folder that shadows the package for scripts run from the
temp dir, and an unusable backend asked for with ``FEARLESS_BACKEND=cuda`` must be one plain
message and a non-zero exit from both commands (this is the failing case on a machine without
a GPU, such as CI; the subprocess tests skip where a GPU is usable).
"""
from __future__ import annotations

import importlib.machinery
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from fearless import cli
from fearless.runtime.device import cuda_probe

ROOT = Path(__file__).resolve().parents[2]
no_gpu = pytest.mark.skipif(cuda_probe()[0], reason="a usable GPU makes FEARLESS_BACKEND=cuda work")


def _fearless(args, tmp_path, **env):
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "FEARLESS_CACHE_DIR": str(tmp_path / "cache"), **env}
    return subprocess.run([sys.executable, "-m", "fearless.cli", *args], capture_output=True,
                          text=True, env=environ, cwd=tmp_path, timeout=300)


def test_the_demo_picture_does_not_shadow_the_package(tmp_path, monkeypatch, capsys):
    import fearless.examples
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(fearless.examples, "NAMES", ("image_filter",))
    assert cli.main(["demo"]) == 0
    out = capsys.readouterr().out
    picture = next(Path(line.split(": ", 1)[1]) for line in out.splitlines()
                   if line.startswith("the image filter's edges"))
    assert picture.is_file() and picture.parent.parent == tmp_path
    # what `import fearless` in a script run from the temp dir would find there: nothing
    # (a folder named `fearless` is a namespace package that hides an editable install), and
    # the folder's own name is no module name an import statement could spell
    assert importlib.machinery.PathFinder.find_spec("fearless", [str(tmp_path)]) is None
    assert not picture.parent.name.isidentifier()


@no_gpu
def test_doctor_fails_when_the_backend_asked_for_is_unusable(tmp_path):
    run = _fearless(["doctor"], tmp_path, FEARLESS_BACKEND="cuda")
    assert run.returncode == 1, run.stdout + run.stderr
    last = run.stdout.splitlines()[-1]
    assert last.startswith("FAIL  backend: FEARLESS_BACKEND=cuda asks for the GPU, which "
                           "cannot run kernels"), run.stdout
    assert "kernels run on the cpu backend" not in run.stdout


def test_doctor_passes_on_the_cpu_backend(tmp_path):
    run = _fearless(["doctor"], tmp_path, FEARLESS_BACKEND="cpu")
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.splitlines()[-1] == "OK    backend: cpu (FEARLESS_BACKEND)"


@no_gpu
def test_demo_stops_at_the_unusable_backend_with_one_message(tmp_path):
    run = _fearless(["demo"], tmp_path, FEARLESS_BACKEND="cuda")
    assert run.returncode == 1
    assert "Traceback" not in run.stdout + run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "FEARLESS_BACKEND=cuda asks for the GPU" in errors[0], run.stderr
    assert len((run.stdout + run.stderr).splitlines()) <= 3
