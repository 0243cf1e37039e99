"""print() inside kernels: per-thread lines in thread order on the cpu backend, formatted like
Python's print of the values in their dtype; vprintf with a packed argument buffer in the PTX."""
from __future__ import annotations

import numpy as np
import pytest

import fearless as fl
from fearless import f32
from fearless.errors import CompileError
from fearless.ir import types as T


@fl.kernel
def show(x: fl.Slice[f32], n: fl.i32):
    i = fl.thread.index_1d()
    if i < 3:
        print("thread", i, "x =", x[i], i < 1, n, sep=" ", end="!\n")


@fl.kernel
def percent(x: fl.Slice[f32]):
    print("100% of", fl.f16(0.1), 5 % 3, 2.5, fl.u8(255), sep=",")


@fl.kernel
def bad_print(x: fl.Slice[f32]):
    print(x)


ARGS = (T.Array(fl.f32, 1, T.Access.READ, True), T.Scalar(fl.i32))


def test_prints_per_thread_in_thread_order(capsys):
    fl.set_backend("cpu")
    show[show.prepare(8, block=4)](fl.asarray(np.array([0.1, 1.5, 3, 4] * 2, np.float32)), 7)
    fl.synchronize()
    assert capsys.readouterr().out == ("thread 0 x = 0.1 True 7!\nthread 1 x = 1.5 False 7!\n"
                                       "thread 2 x = 3.0 False 7!\n")


def test_print_formats_like_python(capsys):
    fl.set_backend("cpu")
    percent[percent.prepare(1, block=1)](fl.asarray(np.zeros(1, np.float32)))
    assert capsys.readouterr().out == "100% of,0.1,2,2.5,255\n"


def test_printing_an_array_is_refused():
    with pytest.raises(CompileError, match="prints numbers and string literals"):
        bad_print.inspect("ir", ARGS[:1])


def test_ptx_calls_vprintf_with_a_format_string():
    ptx = show.inspect("ptx", ARGS)
    assert "call.uni" in ptx and "vprintf" in ptx
    fmt = b"thread %lld x = %g %s %lld!\n"
    assert ", ".join(map(str, fmt)) in ptx
    text = percent.inspect("ptx", ARGS[:1])
    assert ", ".join(map(str, b"100%% of,%g,2,2.5,%llu\n")) in text


@pytest.mark.gpu
def test_vprintf_prints_on_the_gpu(backend, capfd):
    show[show.prepare(8, block=4)](fl.asarray(np.array([0.1, 1.5, 3, 4] * 2, np.float32)), 7)
    fl.synchronize()
    out = capfd.readouterr().out
    for line in ("thread 0 x = 0.1 True 7!", "thread 1 x = 1.5 False 7!",
                 "thread 2 x = 3 False 7!"):
        assert line in out
