"""Device functions (``@fl.func``): calls with defaults and keyword arguments (bound as Python
binds them), on the CPU, through PTX and cubin, in tile kernels; and diagnostics that name the
device functions and call sites between the kernel and the line at fault."""
from __future__ import annotations

import numpy as np
import pytest

import fearless as fl
import fearless.tile as ft
from fearless import f32
from fearless.backends.tileir import tileiras
from fearless.errors import CompileError, FearlessError, KernelBoundsError, SafetyError
from fearless.ir import types as T
from tests.errors import bad_funcs as bf
from tests.errors.test_diagnostics import INTERNAL
from tests.support import BACKENDS, random_array

FILE = bf.__file__

SLOPE = 0.5


@fl.func
def leaky(v, slope=SLOPE, *, bias=0.0):
    return (v if v > 0 else v * slope) + bias


@fl.func
def mix(a, /, b, *, weight):
    return leaky(a * weight, bias=b) + leaky(b, 0.25)


SLOPE = 0.125  # rebound after the def: leaky's default stays 0.5, as in Python


@fl.kernel
def calls(x: fl.Slice[f32], y: fl.Slice[f32], out: fl.DisjointArray[f32, 2]):
    r, c = fl.thread.index_2d()
    if r < out.shape[0] and c < out.shape[1]:
        v, w = x[c], y[c]
        if r == 0:
            out[r, c] = leaky(v)
        elif r == 1:
            out[r, c] = leaky(v, 0.25)
        elif r == 2:
            out[r, c] = leaky(bias=w, v=v)
        elif r == 3:
            out[r, c] = leaky(v, slope=2.5, bias=1.5)
        else:
            out[r, c] = mix(v, weight=3.0, b=w)


def _leaky(v, slope=np.float32(0.5), bias=np.float32(0)):
    """The reference, in f32 operation by operation as the kernel computes it."""
    return np.where(v > 0, v, v * np.float32(slope)) + np.float32(bias)


def _expected(x, y):
    f = np.float32
    return np.stack([_leaky(x), _leaky(x, f(0.25)), _leaky(x, bias=y),
                     _leaky(x, f(2.5), f(1.5)),
                     _leaky(x * f(3.0), bias=y) + _leaky(y, f(0.25))])


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_defaults_and_keyword_arguments(backend):
    n = 1000
    x, y = random_array(fl.f32, n, 1), random_array(fl.f32, n, 2)
    assert (x < 0).any() and (x > 0).any()
    out = fl.full((5, n), np.nan, f32)
    calls[calls.prepare((5, n))](fl.asarray(x), fl.asarray(y), out)
    got = out.numpy()
    want = _expected(x, y)
    # the same f32 operations in the same order: equal to the last bit
    np.testing.assert_array_equal(got, want)
    # and the f32 reference is the float64 one within f32 rounding of each step
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    assert np.allclose(want[3], np.where(x64 > 0, x64, 2.5 * x64) + 1.5, rtol=2.4e-7, atol=1e-6)


def test_defaults_are_the_values_of_the_def_and_enter_the_cache_key():
    key = "".join(calls.fingerprint())
    assert "float:0.5" in key and "bias=float:0.0" in key


ARRAY = T.Array(f32, 1, T.Access.READ, True)
OUT2 = T.Array(f32, 2, T.Access.DISJOINT, True)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_calls_with_keywords_compile_to_ptx(arch):
    ptx = calls.inspect("ptx", (ARRAY, ARRAY, OUT2), arch)
    assert f".target {arch}" in ptx and ".visible .entry calls" in ptx
    for value in (0.5, 0.25, 2.5, 1.5, 3.0):  # every default and keyword value is in the code
        assert f"0f{np.float32(value).view(np.uint32):08X}" in ptx, value


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_calls_with_keywords_link_to_a_cubin(arch):
    pytest.importorskip("cuda.bindings.nvjitlink")
    from fearless.runtime.module import nvjitlink_version
    if nvjitlink_version() == "unavailable":
        pytest.skip("nvJitLink is not installed")
    cubin = calls.inspect("cubin", (ARRAY, ARRAY, OUT2), arch)
    assert cubin.strip()


@fl.func
def scale_tile(t, factor=2.0, *, shift):
    return t * factor + shift


@ft.kernel
def tile_calls(z: ft.Out[f32], x: ft.In[f32]):
    t = ft.load_like(x, z)
    z.store(scale_tile(t, shift=1.0) + scale_tile(shift=0.5, t=t, factor=-3.0))


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_tile_kernels_call_with_defaults_and_keywords(backend):
    n = 3000
    x = random_array(fl.f32, n, 3)
    z = fl.full(n, np.nan, f32).partition(1024)
    z, _ = tile_calls(z, fl.asarray(x)).sync()
    f = np.float32
    want = (x * f(2.0) + f(1.0)) + (x * f(-3.0) + f(0.5))
    np.testing.assert_allclose(z.unpartition().numpy(), want, rtol=1e-6, atol=1e-6)


@pytest.mark.skipif(tileiras.find() is None, reason="tileiras not installed")
def test_tile_calls_with_keywords_compile_for_the_gpu():
    from fearless.runtime.ahead import compile_only
    with compile_only(["sm_80", "sm_90"]) as made:
        tile_calls(fl.zeros(2048).partition(1024), fl.ones(2048)).sync()
    assert sorted(arch for *_, arch, _ in made) == ["sm_80", "sm_90"]
    assert all(compiled.cubin for *_, compiled in made)


# diagnostics ---------------------------------------------------------------------------------

GOLDEN = {
    "nested": (CompileError, """\
kernel 'nested': name 'not_defined_anywhere' is not defined
 --> bad_funcs.py:9:16
  |
9 |     return v + not_defined_anywhere
  |                ^^^^^^^^^^^^^^^^^^^^
  = note: in device function 'add_undefined' (bad_funcs.py:8),
          called from device function 'twice_undefined' (bad_funcs.py:14),
          called from kernel 'nested' (bad_funcs.py:20)"""),
    "writes_neighbour": (SafetyError, """\
kernel 'writes_neighbour', parameter 'out': a DisjointSlice may be written only at this thread's \
own index, and this index is a computed integer
  --> bad_funcs.py:25:9
   |
25 |     out[i + 1] = v
   |         ^^^^^
   = note: in device function 'put_next' (bad_funcs.py:24),
           called from kernel 'writes_neighbour' (bad_funcs.py:31)
help: index with i = fl.thread.index_1d() itself; arithmetic on a ThreadIndex gives a plain \
integer, which could be another thread's element"""),
    "unknown_keyword": (CompileError, """\
kernel 'unknown_keyword': 'leaky' has no parameter 'slop'
  --> bad_funcs.py:54:26
   |
54 |     out[i] = leaky(x[i], slop=0.2)
   |                          ^^^^^^^^
help: did you mean 'slope'? (the signature is leaky(v, slope=0.1, *, bias=0.0))"""),
    "tile_calls_bad": (CompileError, """\
kernel 'tile_calls_bad': str constants are not supported in kernels
   --> bad_funcs.py:110:16
    |
110 |     return t + "text"
    |                ^^^^^^
    = note: in device function 'tile_plus_text' (bad_funcs.py:109),
            called from kernel 'tile_calls_bad' (bad_funcs.py:115)"""),
    "two_values": (CompileError, """\
kernel 'two_values': 'leaky' got two values for parameter 'slope'
  --> bad_funcs.py:60:31
   |
60 |     out[i] = leaky(x[i], 0.2, slope=0.3)
   |                               ^^^^^^^^^
help: the signature is leaky(v, slope=0.1, *, bias=0.0)"""),
    "missing_argument": (CompileError, """\
kernel 'missing_argument': 'leaky' is missing 1 argument: 'v'
  --> bad_funcs.py:66:14
   |
66 |     out[i] = leaky(slope=0.3)
   |              ^^^^^^^^^^^^^^^^
help: the signature is leaky(v, slope=0.1, *, bias=0.0)"""),
    "too_many": (CompileError, """\
kernel 'too_many': 'leaky' takes 2 positional arguments, got 3
  --> bad_funcs.py:72:31
   |
72 |     out[i] = leaky(x[i], 0.2, 1.0)
   |                               ^^^
help: the signature is leaky(v, slope=0.1, *, bias=0.0)"""),
    "positional_only_by_name": (CompileError, """\
kernel 'positional_only_by_name': parameter 'v' of 'scaled' is positional-only
  --> bad_funcs.py:83:21
   |
83 |     out[i] = scaled(v=x[i])
   |                     ^^^^^^
help: pass it by position"""),
    "bad_default": (CompileError, """\
kernel 'bad_default': the default of parameter 'table' of 'with_list_default': a list object \
cannot be used inside a kernel
  --> bad_funcs.py:87:32
   |
87 | def with_list_default(v, table=[1.0, 2.0]):
   |                                ^^^^^^^^^^
   = note: in device function 'with_list_default' (bad_funcs.py:87),
           called from kernel 'bad_default' (bad_funcs.py:94)
help: a default is evaluated once, when the def runs: use a number, a tuple, a dtype or a \
function"""),
    "star_parameter": (CompileError, """\
kernel 'star_parameter': device function 'varargs' has a *vs parameter; device functions take \
named parameters only
  --> bad_funcs.py:98:14
   |
98 | def varargs(*vs):
   |              ^^
   = note: in device function 'varargs' (bad_funcs.py:98),
           called from kernel 'star_parameter' (bad_funcs.py:105)"""),
}


def text(err) -> str:
    return str(err).replace(FILE, "bad_funcs.py")


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_diagnostics_in_and_around_device_functions(name):
    kernel = getattr(bf, name)
    cls, golden = GOLDEN[name]
    with pytest.raises(FearlessError) as info:
        if isinstance(kernel, ft.TileKernel):
            kernel(fl.zeros(1024).partition(256), fl.zeros(1024))
        else:
            kernel[kernel.prepare(10)](fl.zeros(10), fl.zeros(10))
    assert type(info.value) is cls
    assert text(info.value) == golden
    assert not INTERNAL.search(str(info.value))


def test_a_bounds_error_inside_a_device_function_names_the_chain():
    k = bf.reads_past_end
    k[k.prepare(10)](fl.asarray(random_array(fl.f32, 10)), fl.full(10, np.nan, f32))
    with pytest.raises(KernelBoundsError) as info:
        fl.synchronize()
    assert text(info.value) == """\
kernel 'reads_past_end', parameter 'x': read out of bounds: index 10, but the length is 10
  --> bad_funcs.py:36:12
   |
36 |     return x[i + 1]
   |            ^^^^^^^^
   = note: in device function 'next_of' (bad_funcs.py:35),
           called from kernel 'reads_past_end' (bad_funcs.py:43)
help: guard the read (if i < len(x): ...) or launch with a size that fits the inputs; this read \
was skipped and gave 0"""
