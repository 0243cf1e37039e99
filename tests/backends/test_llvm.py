"""The LLVM backend read through its PTX (llvmlite's NVPTX target needs no GPU), and cubins
assembled offline by nvJitLink."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest

import fearless as fl
from fearless import f32
from fearless.ir import types as T

READ = T.Array(fl.f32, 1, T.Access.READ, True)
OUT = T.Array(fl.f32, 1, T.Access.DISJOINT, True)


@fl.kernel
def scale(a: f32, x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = a * x[i]


@fl.kernel
def softplus(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = math.log1p(math.exp(x[i]))


@fl.kernel
def gather(idx: fl.Slice[fl.i64], x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = x[idx[i]]  # idx[i] is proven in bounds by the guard, x[idx[i]] is not


def ptx(kernel, types, arch="sm_90"):
    return kernel.inspect("ptx", types, arch)


@fl.kernel
def rounded(x: fl.Slice, out: fl.DisjointSlice):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = np.rint(x[i])


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("d, cvt", [(fl.f16, "cvt.rni.f16.f16"), (fl.f32, "cvt.rni.f32.f32"),
                                    (fl.f64, "cvt.rni.f64.f64")], ids=str)
def test_rint_is_one_round_to_nearest_even_instruction(d, cvt, arch):
    text = ptx(rounded, (T.Array(d, 1, T.Access.READ, True),
                         T.Array(d, 1, T.Access.DISJOINT, True)), arch)
    assert cvt in text


def test_ptx_targets_the_arch_and_uses_64_bit_indexing():
    text = ptx(scale, (T.Scalar(fl.f32), READ, OUT), "sm_80")
    assert ".target sm_80" in text and ".address_size 64" in text
    assert re.search(r"mul\.wide\.u32|cvt\.u64\.u32", text)  # thread index widened to 64 bits
    assert "ld.global.nc" in text  # read-only inputs go through the non-coherent cache


def test_bounds_checks_add_an_error_word_that_unchecked_kernels_lack():
    types = (T.Array(fl.i64, 1, T.Access.READ, True), READ, OUT)
    checked = ptx(gather, types)
    unchecked = ptx(fl.unchecked(gather), types)
    assert "atom.relaxed.sys.global.cas.b64" in checked
    assert "cas" not in unchecked
    params = lambda text: len(re.findall(r"\.param \.\S+ (?:\.ptr \.global \.align \d+ )?\w+_param_\d+",
                                         text))
    assert params(checked) == params(unchecked) + 1


def test_libdevice_is_linked_only_when_used_and_only_what_is_used():
    text = ptx(softplus, (READ, OUT))
    assert "__nv_" not in text  # inlined, internal functions dropped
    assert "ex2.approx" in text or "ex2" in text
    assert len(text) < 20000
    plain = ptx(scale, (T.Scalar(fl.f32), READ, OUT))
    assert "ex2" not in plain


def test_nvjitlink_assembles_a_cubin_without_a_gpu():
    pytest.importorskip("cuda.bindings.nvjitlink")
    from fearless.runtime.module import nvjitlink_version
    if nvjitlink_version() == "unavailable":
        pytest.skip("nvJitLink is not installed")
    text = scale.inspect("cubin", (T.Scalar(fl.f32), READ, OUT), "sm_90")
    assert re.match(r"cubin: \d+ bytes", text)


def test_strided_arrays_take_strides_as_parameters():
    strided = T.Array(fl.f32, 1, T.Access.READ, False)
    contiguous = ptx(scale, (T.Scalar(fl.f32), READ, OUT))
    text = ptx(scale, (T.Scalar(fl.f32), strided, OUT))
    count = lambda t: t.count("_param_")
    assert count(text) > count(contiguous)
