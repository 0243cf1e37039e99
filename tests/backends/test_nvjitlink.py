"""nvJitLink versions known to miscompile are named, by ``fearless doctor`` and at the first
PTX -> cubin of a process (a ToolchainWarning), never used silently.

Found by the differential fuzzer on the H200 (seed 5545): with CUDA 13.0's nvJitLink,
``fl.i64(-x)`` of an i16 ``x = -32768`` gave +32768 (the sign extension after ``neg.s16`` was
dropped); nvJitLink 13.5 computes -32768, as the CPU backend does.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import fearless as fl
from fearless import doctor
from fearless.errors import ToolchainWarning
from fearless.runtime import module


@pytest.fixture
def version(monkeypatch):
    def use(v: str):
        monkeypatch.setattr(module, "nvjitlink_version", lambda: v)
        module._warn_if_old_nvjitlink.cache_clear()
    yield use
    module._warn_if_old_nvjitlink.cache_clear()


def test_an_old_nvjitlink_is_named_by_doctor(version):
    version("13.0")
    ok, text = doctor._nvjitlink()
    assert not ok and "nvJitLink 13.0 miscompiles" in text and "nvidia-nvjitlink>=13.5" in text
    version("13.5")
    assert doctor._nvjitlink() == (True, "PTX -> cubin: nvJitLink 13.5")


def test_an_old_nvjitlink_warns_once_per_process(version):
    version("13.0")
    with pytest.warns(ToolchainWarning, match="16-bit negation"):
        module._warn_if_old_nvjitlink()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        module._warn_if_old_nvjitlink()  # once


@fl.kernel
def negate_i16(x: fl.Slice[fl.i16], out: fl.DisjointSlice[fl.i64]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = fl.i64(-x[i])


@pytest.mark.gpu
def test_i16_negation_wraps_on_the_gpu():
    if module.nvjitlink_problem():
        pytest.skip(module.nvjitlink_problem())
    x = np.array([-32768, 32767, -5, 0, 1, 12345], np.int16)
    out = fl.full(x.size, 7, fl.i64)  # poison
    negate_i16[negate_i16.prepare(x.size)](fl.asarray(x), out)
    want = np.array([(-int(v) + 32768) % 65536 - 32768 for v in x])  # -x wrapped to i16
    np.testing.assert_array_equal(out.numpy(), want)
