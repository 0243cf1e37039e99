"""``fearless inspect --stage sass``: the disassembler found on PATH or in the CUDA wheels, a
stand-in tool's output passed through, a clear error without one, and the real tool when
installed."""
from __future__ import annotations

import stat
import sys

import pytest

import fearless as fl
from fearless import cli
from fearless.errors import BackendError
from fearless.ir import types as T
from fearless.runtime import disasm


@fl.kernel
def scale(a: fl.f32, x: fl.Slice[fl.f32], out: fl.DisjointSlice[fl.f32]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = a * x[i]


TYPES = (T.Scalar(fl.f32), T.Array(fl.f32, 1, T.Access.READ, True),
         T.Array(fl.f32, 1, T.Access.DISJOINT, True))


def needs_nvjitlink():
    pytest.importorskip("cuda.bindings.nvjitlink")
    from fearless.runtime.module import nvjitlink_version
    if nvjitlink_version() == "unavailable":
        pytest.skip("nvJitLink is not installed")


def test_a_clear_error_without_a_disassembler(monkeypatch):
    needs_nvjitlink()
    monkeypatch.setattr(disasm, "find", lambda: None)
    with pytest.raises(BackendError, match="needs nvdisasm or cuobjdump") as info:
        scale.inspect("sass", TYPES)
    # the wheels that ship the tools (nvidia-cuda-nvcc, installed with the tile extra, has neither)
    assert "pip install nvidia-cuda-nvdisasm (or nvidia-cuda-cuobjdump)" in str(info.value)
    assert "nvidia-cuda-nvcc" not in str(info.value)


@pytest.mark.parametrize("tool", ["nvdisasm", "cuobjdump"])
def test_the_tool_is_found_where_its_wheel_installs_it(tmp_path, monkeypatch, tool):
    # nvidia-cuda-nvdisasm and nvidia-cuda-cuobjdump 13.x install nvidia/cu13/bin/<tool>
    exe = tmp_path / "nvidia" / "cu13" / "bin" / tool
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    for var in ("CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(disasm, "_wheel_dirs", lambda: [tmp_path / "nvidia"])
    assert disasm.find() == (tool, str(exe))


@pytest.mark.parametrize("tool, flag", [("nvdisasm", "--print-code"), ("cuobjdump", "-sass")])
def test_the_tool_found_on_path_disassembles_the_cubin(tmp_path, monkeypatch, tool, flag):
    needs_nvjitlink()
    fake = tmp_path / tool
    fake.write_text(f"#!{sys.executable}\nimport sys\nprint(sys.argv[1])\n"
                    f"print(open(sys.argv[2], 'rb').read()[1:4].decode())\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert disasm.find() == (tool, str(fake))
    text = scale.inspect("sass", TYPES)
    assert text.splitlines()[0] == flag
    assert "ELF" in text  # the disassembler got the cubin


def test_cli_lists_the_sass_stage():
    assert "sass" in cli.STAGE_NAMES


def test_real_disassembler_when_installed():
    needs_nvjitlink()
    if disasm.find() is None:
        pytest.skip("neither nvdisasm nor cuobjdump is installed")
    text = scale.inspect("sass", TYPES)
    assert "FMUL" in text or "FFMA" in text
