"""``fearless sanitize``: the command line it runs, the skip without compute-sanitizer, and the
exit code of a finding (with a stand-in sanitizer; the real one is exercised on a GPU host)."""
from __future__ import annotations

import stat
import sys

import pytest

from fearless import cli, sanitize


def test_command_runs_the_script_with_an_error_exit_code():
    cmd = sanitize.command("/cuda/bin/compute-sanitizer", "job.py", "racecheck", ["-n", "3"])
    assert cmd == ["/cuda/bin/compute-sanitizer", "--tool", "racecheck", "--error-exitcode",
                   "86", "--target-processes", "all", sys.executable, "job.py", "-n", "3"]


def test_skipped_cleanly_without_compute_sanitizer(monkeypatch, capsys):
    monkeypatch.setattr(sanitize, "find", lambda: None)
    assert cli.main(["sanitize", "job.py", "--tool", "initcheck"]) == 0
    assert "compute-sanitizer was not found" in capsys.readouterr().err


@pytest.mark.parametrize("code", [0, 86])
def test_a_finding_is_a_non_zero_exit(tmp_path, monkeypatch, code):
    fake = tmp_path / "compute-sanitizer"
    fake.write_text(f"#!/bin/sh\nexit {code}\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(sanitize, "find", lambda: str(fake))
    assert cli.main(["sanitize", "job.py", "--", "--size", "10"]) == code


@pytest.mark.gpu
def test_memcheck_finds_nothing_in_a_safe_example(backend):
    if sanitize.find() is None:
        pytest.skip("compute-sanitizer is not installed")
    from pathlib import Path
    script = Path(__file__).resolve().parents[2] / "examples" / "vector_add.py"
    assert sanitize.run(str(script), "memcheck") == 0
