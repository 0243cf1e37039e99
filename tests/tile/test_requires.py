"""``@ft.kernel(requires=...)``: size relations between a tile kernel's parameters (the grammar of
a SIMT contract's ``requires``), checked at every call before anything is enqueued, on both
backends and on the repeat call's fast path; refused relations are ContractErrors that show
both sides, and a relation naming something other than a parameter is refused at decoration."""
from __future__ import annotations

import numpy as np
import pytest

import fearless as fl
from fearless import f32, i64
from fearless import tile as ft
from fearless.errors import ContractError
from tests.support import BACKENDS


@ft.kernel(requires=("len(x) == len(z)", lambda x, n, bk: len(x) >= n * bk))
def head_scaled(z: ft.Out[f32], x: ft.In[f32], n: i64, bk: ft.Const[int] = 16):
    z.store(ft.load_like(x, z) * 2.0)


def _x(n: int, seed: int):
    return fl.asarray(np.random.default_rng(seed).standard_normal(n).astype(np.float32))


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_calls_that_keep_the_requirements_run(backend):
    for seed in range(3):  # on cuda, the later calls go through the call's plan
        x = _x(256, seed)
        z, _, _ = head_scaled(fl.full(256, np.nan, f32).partition(64), x, 16).sync()
        np.testing.assert_array_equal(z.unpartition().numpy(), x.numpy() * 2)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_calls_that_break_a_requirement_are_refused_before_anything_runs(backend):
    x = _x(256, 4)
    head_scaled(fl.zeros(256).partition(64), x, 16).sync()  # a plan on cuda, for what follows
    z = fl.full(128, np.nan, f32).partition(64)
    with pytest.raises(ContractError) as info:
        head_scaled(z, x, 16)
    assert str(info.value) == (
        "kernel 'head_scaled': the launch breaks the kernel's requirement `len(x) == len(z)`: "
        "len(x) = 256, len(z) = 128, and 256 == 128 is false\n"
        "help: pass arguments whose sizes satisfy the requirement, or change the kernel's "
        "requires=")
    z = fl.full(256, np.nan, f32).partition(64)
    with pytest.raises(ContractError, match=r"`len\(x\) >= n \* bk`: len\(x\) = 256, "
                                            r"n \* bk = 272, and 256 >= 272 is false"):
        head_scaled(z, x, 17)
    with pytest.raises(ContractError, match=r"n \* bk = 512"):
        head_scaled(z, x, 16, bk=32)  # the constant takes part too
    z, _, _ = head_scaled(z, x, 16).sync()  # the refused calls left the partition free
    np.testing.assert_array_equal(z.unpartition().numpy(), x.numpy() * 2)


def test_requirements_are_checked_when_the_kernel_is_decorated():
    with pytest.raises(ContractError) as info:
        @ft.kernel(requires="len(y) >= m")
        def bad(z: ft.Out[f32], x: ft.In[f32]):
            z.store(ft.load_like(x, z))
    assert str(info.value) == ("kernel 'bad': requires `len(y) >= m` names m, y, which are not "
                               "a parameter\nhelp: the parameters are z, x")
    with pytest.raises(ContractError, match=r"requires `x.shape\[0\] >= 1`: `x.shape\[0\]` is "
                                            r"not allowed"):
        ft.kernel(requires="x.shape[0] >= 1")(head_scaled.fn)
