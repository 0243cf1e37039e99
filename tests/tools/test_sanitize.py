"""``fearless sanitize``: the command line it runs, the skip without compute-sanitizer, and the
exit code of a finding (with a stand-in sanitizer; the real one is exercised on a GPU host)."""
from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from fearless import cli, sanitize


def test_command_runs_the_script_with_an_error_exit_code():
    cmd = sanitize.command("/cuda/bin/compute-sanitizer", "job.py", "racecheck", ["-n", "3"])
    assert cmd == ["/cuda/bin/compute-sanitizer", "--tool", "racecheck", "--error-exitcode",
                   "86", "--target-processes", "application-only", sys.executable, "job.py",
                   "-n", "3"]


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
    script = Path(__file__).resolve().parents[2] / "examples" / "vector_add.py"
    assert sanitize.run(str(script), "memcheck") == 0


def test_several_runs_in_parallel_with_a_summary(tmp_path, monkeypatch, capsys):
    fake = tmp_path / "compute-sanitizer"  # a finding under racecheck only
    fake.write_text('#!/bin/sh\necho "sanitizing $2"\n[ "$2" = racecheck ] && exit 86\nexit 0\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(sanitize, "find", lambda: str(fake))
    code = cli.main(["sanitize", "a.py", "b.py", "--tool", "memcheck", "--tool", "racecheck",
                     "--jobs", "3"])
    out = capsys.readouterr().out.splitlines()
    assert code == sanitize.FINDING_EXIT
    assert [line.split()[:3] for line in out] == [
        ["a.py", "memcheck", "clean"], ["a.py", "racecheck", "FINDING"],
        ["b.py", "memcheck", "clean"], ["b.py", "racecheck", "FINDING"]]
    log = out[1].split()[-1]
    assert open(log).read() == "sanitizing racecheck\n"


def test_all_tools_and_the_scripts_arguments(tmp_path, monkeypatch, capsys):
    fake = tmp_path / "compute-sanitizer"
    fake.write_text('#!/bin/sh\necho "$@"\nexit 0\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(sanitize, "find", lambda: str(fake))
    assert cli.main(["sanitize", "a.py", "--tool", "all", "--", "-n", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in lines] == list(sanitize.TOOLS)
    assert open(lines[0].split()[-1]).read().rstrip().endswith("a.py -n 3")


EXAMPLES = sorted(p for p in (Path(__file__).resolve().parents[2] / "examples").glob("*.py")
                  if not p.name.startswith("_"))


@pytest.mark.gpu
def test_every_example_is_clean_under_every_tool(backend, monkeypatch, tmp_path):
    """Done-means of the SIMT-depth issue: no finding for any example (small sizes: the
    sanitizer slows kernels down by orders of magnitude)."""
    if sanitize.find() is None:
        pytest.skip("compute-sanitizer is not installed")
    monkeypatch.setenv("FEARLESS_EXAMPLE_SIZES", "small")
    assert sanitize.run_many([str(p) for p in EXAMPLES], sanitize.TOOLS, jobs=8,
                             log_dir=str(tmp_path)) == 0
