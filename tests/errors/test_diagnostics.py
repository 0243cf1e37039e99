"""Golden diagnostics: the exact text users see for each refused kernel or launch.

The texts name the kernel and parameter, point at the source line with a caret, and give a
``help:`` line; none may mention fearless's internal modules, classes or op names.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import fearless as fl
from fearless.errors import (AliasError, ArgumentTypeError, CompileError, ContractError,
                             FearlessError, KernelBoundsError, LaunchError, SafetyError)
from tests.errors import bad_kernels as bk

FILE = bk.__file__
INTERNAL = re.compile(r"fearless\.(ir|frontend|backends|passes|runtime)|Operation|Value\b|"
                      r"mem\.(load|store)|arith\.|local\.|simt\.|Traceback")


def compile_error(kernel, size=10, args=None):
    args = args if args is not None else [fl.zeros(size), fl.zeros(size)]
    with pytest.raises(FearlessError) as info:
        kernel[kernel.prepare(size)](*args)
    return info.value


def text(err) -> str:
    return str(err).replace(FILE, "bad_kernels.py")


GOLDEN = {
    "write_input": (SafetyError, """\
kernel 'write_input', parameter 'x': 'x' is a read-only Slice; a kernel may not write it
  --> bad_kernels.py:12:5
   |
12 |     x[i] = 1.0
   |     ^^^^^^^^^^
help: declare it fl.DisjointSlice[T] (or fl.DisjointArray[T, n]) so that each thread writes its \
own element"""),
    "neighbour": (SafetyError, """\
kernel 'neighbour', parameter 'out': a DisjointSlice may be written only at this thread's own \
index, and this index is a computed integer
  --> bad_kernels.py:19:13
   |
19 |         out[i + 1] = x[i]
   |             ^^^^^
help: index with i = fl.thread.index_1d() itself; arithmetic on a ThreadIndex gives a plain \
integer, which could be another thread's element"""),
    "reversed_index": (SafetyError, """\
kernel 'reversed_index', parameter 'out': a DisjointSlice may be written only at this thread's \
own index, and this index is a computed integer
  --> bad_kernels.py:26:9
   |
26 |     out[j] = x[i]
   |         ^
help: index with i = fl.thread.index_1d() itself; arithmetic on a ThreadIndex gives a plain \
integer, which could be another thread's element"""),
    "swapped": (SafetyError, """\
kernel 'swapped', parameter 'out': index 0 of this DisjointArray must be the thread's row, but \
it is the thread's column
  --> bad_kernels.py:32:9
   |
32 |     out[c, r] = a[r, c]
   |         ^
help: index as out[r, c] with r, c = fl.thread.index_2d(), in that order"""),
    "read_neighbour_output": (SafetyError, """\
kernel 'read_neighbour_output', parameter 'out': a DisjointSlice may be read only at this \
thread's own index, and this index is a computed integer
  --> bad_kernels.py:38:18
   |
38 |     out[i] = out[i - 1]
   |                  ^^^^^
help: index with i = fl.thread.index_1d() itself; arithmetic on a ThreadIndex gives a plain \
integer, which could be another thread's element"""),
    "undefined_name": (CompileError, """\
kernel 'undefined_name': name 'not_defined_anywhere' is not defined
  --> bad_kernels.py:44:14
   |
44 |     out[i] = not_defined_anywhere
   |              ^^^^^^^^^^^^^^^^^^^^"""),
    "float_index": (CompileError, """\
kernel 'float_index': index 1.5 is not an integer
  --> bad_kernels.py:50:16
   |
50 |     out[i] = x[1.5]
   |                ^^^"""),
    "both_spaces": (CompileError, """\
kernel 'both_spaces': the kernel uses both index_1d() and index_2d()
  --> bad_kernels.py:56:12
   |
56 |     r, c = fl.thread.index_2d()
   |            ^^^^^^^^^^^^^^^^^^^^
help: use one index space per kernel (index_1d() is used at bad_kernels.py:55:9)"""),
    "float_to_int": (CompileError, """\
kernel 'float_to_int': cannot assign to an array element (i32): a f32 value does not silently \
become i32; cast it explicitly with fl.i32(x)
  --> bad_kernels.py:63:5
   |
63 |     out[i] = x[i]
   |     ^^^^^^^^^^^^^"""),
    "returns_value": (CompileError, """\
kernel 'returns_value': a kernel returns nothing
  --> bad_kernels.py:69:12
   |
69 |     return 1.0
   |            ^^^
help: write results into a fl.DisjointSlice parameter"""),
    "list_literal": (CompileError, """\
kernel 'list_literal': List is not supported in kernels
  --> bad_kernels.py:75:14
   |
75 |     values = [1.0, 2.0]
   |              ^^^^^^^^^^
help: kernels support numbers, arrays, if/for/while, calls of @fearless.func functions and the \
math module"""),
    "huge_shift": (CompileError, """\
kernel 'huge_shift': 1 << 1099511627776 has more than 1024 bits; a literal must fit in 64 bits
  --> bad_kernels.py:96:26
   |
96 |     out[i] = float(i >> (1 << (1 << 40)))  # Python would build a 2**40-bit int first
   |                          ^^^^^^^^^^^^^^"""),
}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_compile_time_refusals_read_like_a_compiler(name):
    kernel = getattr(bk, name)
    cls, golden = GOLDEN[name]
    args = [fl.zeros(10)] if kernel.params and len(kernel.params) == 1 else None
    if name == "swapped":
        err = compile_error(kernel, (3, 3), [fl.zeros((3, 3)), fl.zeros((3, 3))])
    elif name == "float_to_int":
        err = compile_error(kernel, 10, [fl.zeros(10), fl.zeros(10, fl.i32)])
    else:
        err = compile_error(kernel, 10, args)
    assert type(err) is cls
    assert text(err) == golden
    assert not INTERNAL.search(str(err))
    assert err.kernel == name and err.span is not None and err.span.filename == FILE


def test_launch_refusals_name_kernel_and_parameter():
    x = fl.zeros(10)
    cases = [
        (lambda: bk.uses_2d.prepare(10), ContractError,
         "kernel 'uses_2d': the kernel uses fl.thread.index_2d(), but the launch is 1-d (size "
         "(10,))\nhelp: prepare it with a 2-d size, for example kernel.prepare((rows, cols))"),
        (lambda: bk.copy[bk.uses_2d.prepare((2, 5))](x, fl.zeros(10)), ContractError,
         "kernel 'copy': this PreparedLaunch was made for kernel 'uses_2d'\n"
         "help: call copy.prepare(...) for this kernel"),
        (lambda: bk.copy[bk.copy.prepare(10)](x, x), AliasError,
         "kernel 'copy', parameter 'out': 'out' is written and overlaps the memory of 'x'\n"
         "help: a written argument must not share memory with any other argument; pass a "
         "separate output tensor"),
        (lambda: bk.copy[bk.copy.prepare(10)](fl.zeros(10, fl.f64), fl.zeros(10)),
         ArgumentTypeError,
         "kernel 'copy', parameter 'x': expects dtype f32, got f64\n"
         "help: convert the array first, for example fl.asarray(x, fl.f32)"),
        (lambda: bk.copy[bk.copy.prepare(10)](x), ArgumentTypeError,
         "kernel 'copy': takes 2 arguments (x, out), got 1"),
        (lambda: bk.copy[bk.copy.prepare(12)](x, fl.zeros((3, 4))), ArgumentTypeError,
         "kernel 'copy', parameter 'out': expects a 1-d array, got 2-d"),
        (lambda: bk.copy[bk.copy.prepare(10)](x, fl.zeros(12)), ContractError,
         "kernel 'copy', parameter 'out': the launch covers (10,) but 'out' has shape (12,); "
         "elements outside the launch would never be written\n"
         "help: prepare the launch with the output's shape, kernel.prepare(12)"),
        (lambda: bk.copy.prepare(10, block=2048), ContractError,
         "kernel 'copy': block (2048,) has 2048 threads; the device allows at most 1024 threads "
         "per block"),
        (lambda: bk.uses_2d.prepare((70000 * 8, 5)), ContractError,
         "kernel 'uses_2d': the launch needs 70000 blocks along grid y, above the device limit "
         "65535\nhelp: use a larger block, or split the problem"),
        (lambda: bk.copy.launch_raw(1, 10, x, fl.zeros(10)), LaunchError,
         "kernel 'copy': launch_raw skips the launch checks and needs `with fl.unsafe():`\n"
         "help: use copy.prepare(...) instead"),
    ]
    for call, cls, golden in cases:
        with pytest.raises(cls) as info:
            call()
        assert str(info.value) == golden
        assert not INTERNAL.search(str(info.value))
    assert issubclass(ArgumentTypeError, TypeError)  # `except TypeError` keeps working


def test_bounds_error_text():
    out = fl.full(10, np.nan, fl.f32)
    bk.copy[bk.copy.prepare(10)](fl.zeros(10), out)
    with pytest.raises(KernelBoundsError) as info:
        fl.synchronize()
    assert text(info.value) == """\
kernel 'copy', parameter 'x': read out of bounds: index 10, but the length is 10
  --> bad_kernels.py:90:18
   |
90 |         out[i] = x[i + 2]
   |                  ^^^^^^^^
help: guard the read (if i < len(x): ...) or launch with a size that fits the inputs; this read \
was skipped and gave 0"""
