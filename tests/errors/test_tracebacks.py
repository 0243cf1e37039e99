"""A user error's traceback shows the user's frames and the message, none of fearless's own
(``FEARLESS_TRACEBACK=1`` keeps them); an ``InternalError`` keeps all of its frames. The
traceback object itself is trimmed, so Jupyter, pytest and ``traceback`` show the same."""
from __future__ import annotations

import dataclasses
import importlib
import os
import re
import subprocess
import sys
import textwrap
import traceback
from pathlib import Path

import pytest

import fearless as fl
import fearless.tile as ft
from fearless import f32
from fearless.errors import (AliasError, ArgumentTypeError, BackendError, CompileError,
                             ContractError, FearlessError, InternalError, KernelBoundsError,
                             LaunchError, MovedError, SafetyError)
from fearless.ir import types as T
from tests.errors import bad_kernels as bk

PACKAGE = str(Path(fl.__file__).resolve().parent)
SRC = str(Path(fl.__file__).resolve().parent.parent)
FRAME = re.compile(r'^  File "([^"]+)", line (\d+), in (.+)$', re.M)


def frames(text: str) -> list[tuple[str, int, str]]:
    return [(f, int(n), fn) for f, n, fn in FRAME.findall(text)]


def fearless_frames(text: str) -> list:
    return [f for f in frames(text) if f[0].startswith(PACKAGE)]


BAD_SCRIPT = """\
import fearless as fl


@fl.kernel
def shifted(x: fl.Slice[fl.f32], out: fl.DisjointSlice[fl.f32]):
    i = fl.thread.index_1d()
    out[i + 1] = x[i]


def run():
    x, out = fl.zeros(8), fl.zeros(8)
    shifted[shifted.prepare(8)](x, out)


run()
"""


def run_script(tmp_path, source: str, *args: str, **env) -> subprocess.CompletedProcess:
    """``python user_script.py ARGS`` on the cpu backend, with this checkout's fearless."""
    script = tmp_path / "user_script.py"
    script.write_text(textwrap.dedent(source))
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FEARLESS_")}
    environ.update(FEARLESS_BACKEND="cpu", PYTHONPATH=os.pathsep.join(
        [SRC, environ.get("PYTHONPATH", "")]))
    environ.update(env)
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True,
                          env=environ, timeout=300)


def test_a_compile_error_shows_the_users_frames_and_the_message(tmp_path):
    proc = run_script(tmp_path, BAD_SCRIPT)
    assert proc.returncode == 1
    script = str(tmp_path / "user_script.py")
    assert frames(proc.stderr) == [(script, 15, "<module>"), (script, 12, "run")]
    assert proc.stderr.endswith(
        "fearless.errors.SafetyError: kernel 'shifted', parameter 'out': a DisjointSlice may be "
        "written only at this thread's own index, and this index is a computed integer\n"
        f" --> {script}:7:9\n  |\n7 |     out[i + 1] = x[i]\n  |         ^^^^^\n"
        "help: index with i = fl.thread.index_1d() itself; arithmetic on a ThreadIndex gives a "
        "plain integer, which could be another thread's element\n")


def test_fearless_traceback_1_keeps_every_frame(tmp_path):
    proc = run_script(tmp_path, BAD_SCRIPT, FEARLESS_TRACEBACK="1")
    assert proc.returncode == 1 and "SafetyError: kernel 'shifted'" in proc.stderr
    assert len(fearless_frames(proc.stderr)) >= 5  # the launch, compile and pass frames
    assert frames(proc.stderr)[:2] == [(str(tmp_path / "user_script.py"), 15, "<module>"),
                                       (str(tmp_path / "user_script.py"), 12, "run")]


def test_a_bounds_error_at_sync_shows_the_sync_line(tmp_path):
    proc = run_script(tmp_path, """\
        import fearless as fl

        @fl.kernel
        def ahead(x: fl.Slice[fl.f32], out: fl.DisjointSlice[fl.f32]):
            i = fl.thread.index_1d()
            if i < len(out):
                out[i] = x[i + 1]

        x, out = fl.ones(8), fl.zeros(8)
        ahead[ahead.prepare(8)](x, out)
        print(out.numpy())
        """)
    assert proc.returncode == 1 and proc.stdout == ""
    assert frames(proc.stderr) == [(str(tmp_path / "user_script.py"), 11, "<module>")]
    assert "KernelBoundsError: kernel 'ahead', parameter 'x': read out of bounds: index 8" \
        in proc.stderr


# in-process: the traceback object, as Jupyter and pytest read it -----------------------------

@fl.kernel
def copy(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = x[i]


@ft.kernel
def twice(z: ft.Out[f32], x: ft.In[f32]):
    z.store(ft.load_like(x, z) * 2.0)


@ft.kernel
def untyped(z: ft.Out[f32], x: ft.In[f32]):
    z.store(ft.load_like(x, z) + "text")


def _compile_error():
    bk.neighbour[bk.neighbour.prepare(10)](fl.zeros(10), fl.zeros(10))


def _bounds_error_at_numpy():
    out = fl.zeros(10)
    bk.copy[bk.copy.prepare(10)](fl.zeros(10), out)
    out.numpy()


def _sync_moved():
    op = copy.op(copy.prepare(10), fl.zeros(10), fl.zeros(10))
    op.sync()
    op.sync()


def _moved_partition():
    x = fl.zeros(1024)
    x.partition(256)
    x.numpy()


CASES = {
    "compile error at launch": (_compile_error, SafetyError),
    "compile error in .op()": (lambda: bk.neighbour.op(bk.neighbour.prepare(10), fl.zeros(10),
                                                       fl.zeros(10)), SafetyError),
    "compile error in inspect()": (lambda: bk.float_index.inspect("ir", (
        T.Array(f32, 1, T.Access.READ, True), T.Array(f32, 1, T.Access.DISJOINT, True))),
                                   CompileError),
    "contract at prepare()": (lambda: bk.uses_2d.prepare(10), ContractError),
    "a bad Contract": (lambda: fl.Contract(dims=4), ContractError),
    "a kernel given a bad contract": (lambda: fl.kernel(bk.copy.fn, contract="1-d"),
                                      ContractError),
    "argument count": (lambda: copy[copy.prepare(10)](fl.zeros(10)), ArgumentTypeError),
    "argument by keyword": (lambda: copy[copy.prepare(10)](fl.zeros(10), output=fl.zeros(10)),
                            ArgumentTypeError),
    "aliasing": (lambda: (lambda x: copy[copy.prepare(10)](x, x))(fl.zeros(10)), AliasError),
    "a launch of another kernel": (lambda: bk.copy[bk.uses_2d.prepare((2, 5))](
        fl.zeros(10), fl.zeros(10)), ContractError),
    "a launch without a PreparedLaunch": (lambda: copy[10](fl.zeros(10), fl.zeros(10)),
                                          LaunchError),
    "kernel called directly": (lambda: copy(fl.zeros(10), fl.zeros(10)), LaunchError),
    "raw launch outside unsafe": (lambda: copy.launch_raw(1, 10, fl.zeros(10), fl.zeros(10)),
                                  LaunchError),
    "bounds error at numpy()": (_bounds_error_at_numpy, KernelBoundsError),
    "an operation synced twice": (_sync_moved, MovedError),
    "a moved tensor": (_moved_partition, MovedError),
    "tile kernel arguments": (lambda: twice(fl.zeros(1024), fl.zeros(1024)), ArgumentTypeError),
    "tile kernel compile error": (lambda: untyped(fl.zeros(1024).partition(256),
                                                  fl.zeros(1024)), CompileError),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_traceback_object_holds_only_user_frames(name):
    call, cls = CASES[name]
    with pytest.raises(FearlessError) as info:
        call()
    assert type(info.value) is cls
    text = "".join(traceback.format_exception(info.value))
    assert fearless_frames(text) == []
    assert frames(text)[0][0] == __file__  # this test's own frame leads


def test_a_backend_error_shows_the_users_frame():
    from fearless.runtime import device
    if device.cuda_probe()[0]:
        pytest.skip("a usable GPU: the cuda backend is not refused")
    with pytest.raises(BackendError) as info:
        fl.set_backend("cuda")
    text = "".join(traceback.format_exception(info.value))
    assert fearless_frames(text) == [] and frames(text)[0][0] == __file__


def test_a_callback_fearless_calls_keeps_its_frame():
    def callback(result):
        x, out = result
        copy[copy.prepare(10)](x, out)  # an eager launch inside a running operation

    op = copy.op(copy.prepare(10), fl.zeros(10), fl.zeros(10)).then(callback)
    with pytest.raises(LaunchError, match="inside a running") as info:
        op.sync()
    text = "".join(traceback.format_exception(info.value))
    assert fearless_frames(text) == []
    assert [f[2] for f in frames(text)] == [
        "test_a_callback_fearless_calls_keeps_its_frame", "callback"]


def test_an_internal_error_keeps_its_frames(monkeypatch):
    kernel_module = importlib.import_module("fearless.kernel.base")  # fl.kernel is the decorator

    def broken(*args, **kwargs):
        raise KeyError("a bug in the compiler")

    monkeypatch.setattr(importlib.import_module("fearless.kernel.simt"), "compile_simt", broken)
    monkeypatch.setattr(kernel_module, "CONFIG",  # compile, not a hit of an earlier test's entry
                        dataclasses.replace(kernel_module.CONFIG, disk_cache=False))
    fresh = fl.kernel(bk.copy.fn)
    with pytest.raises(InternalError) as info:
        fresh[fresh.prepare(10)](fl.zeros(12), fl.zeros(10))
    text = "".join(traceback.format_exception(info.value))
    assert any(f[0].endswith("kernel/simt.py") and f[2] == "_compile" for f in fearless_frames(text))
    assert "KeyError: 'a bug in the compiler'" in text  # the cause, with its own frames


# an error never synchronised, reported at exit --------------------------------------------------

UNSYNCED = """\
import sys
import fearless as fl

@fl.kernel
def ahead(x: fl.Slice[fl.f32], out: fl.DisjointSlice[fl.f32]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = x[i + 1]

ahead[ahead.prepare(8)](fl.ones(8), fl.zeros(8))
print("the script's own output", flush=False)
if sys.argv[1:] == ["raise"]:
    raise RuntimeError("the script failed on its own")
if sys.argv[1:] == ["exit"]:
    sys.exit(0)
"""


@pytest.mark.parametrize("how", ["end", "exit"])
def test_an_error_reported_at_exit_makes_the_exit_status_non_zero(tmp_path, how):
    proc = run_script(tmp_path, UNSYNCED, how)
    assert proc.returncode == 1
    assert proc.stdout == "the script's own output\n"  # flushed before the process ends
    assert proc.stderr.startswith(
        "fearless: at exit, an error from a kernel that was never synchronised:\n"
        "KernelBoundsError: kernel 'ahead', parameter 'x': read out of bounds: index 8")


@pytest.mark.gpu
def test_an_error_reported_at_exit_on_the_gpu_makes_the_exit_status_non_zero(tmp_path):
    proc = run_script(tmp_path, UNSYNCED, "end", FEARLESS_BACKEND="cuda")
    assert proc.returncode == 1
    assert "KernelBoundsError: kernel 'ahead', parameter 'x': read out of bounds: index 8" \
        in proc.stderr


def test_a_script_that_failed_keeps_its_own_traceback_and_status(tmp_path):
    proc = run_script(tmp_path, UNSYNCED, "raise")
    assert proc.returncode == 1
    assert "RuntimeError: the script failed on its own" in proc.stderr
    assert "fearless: at exit, an error from a kernel" in proc.stderr

