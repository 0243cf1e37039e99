"""Launch contracts: fields checked at decoration, prepare() against contract and device,
``requires`` at every launch (both sides shown), launch bounds in the PTX, and GPU behaviour
(the driver enforcing ``.reqntid`` on a raw launch, the opt-in above 48 KB of shared memory)."""
from __future__ import annotations

import re

import numpy as np
import pytest

import fearless as fl
from fearless.errors import ContractError
from fearless.ir import types as T
from fearless.runtime import launch as launch_mod
from tests.runtime import contract_kernels as k

BACKENDS = [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)]
R1, O1 = T.Array(fl.f32, 1, T.Access.READ, True), T.Array(fl.f32, 1, T.Access.DISJOINT, True)
R2, O2 = T.Array(fl.f32, 2, T.Access.READ, True), T.Array(fl.f32, 2, T.Access.DISJOINT, True)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_contracted_launch_runs_with_the_contract_block(backend):
    x, out = fl.asarray(np.arange(256, dtype=np.float32)), fl.zeros(256)
    launch = k.scaled.prepare(256)
    assert launch.block == (128,)
    k.scaled[launch](x, 16, 16, out)
    np.testing.assert_array_equal(out.numpy(), np.arange(256) * 2.0)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_requires_is_checked_at_every_launch_with_both_sides(backend):
    x, out = fl.asarray(np.arange(256, dtype=np.float32)), fl.zeros(256)
    launch = k.scaled.prepare(256)
    with pytest.raises(ContractError) as info:
        k.scaled[launch](x, 16, 17, out)
    assert str(info.value) == (
        "kernel 'scaled': the launch breaks the contract's requirement `len(x) >= n * k`: "
        "len(x) = 256, n * k = 272, and 256 >= 272 is false\n"
        "help: pass arguments whose sizes satisfy the requirement, or change the kernel's "
        "contract")
    with pytest.raises(ContractError, match=r"`len\(out\) == len\(x\)`: len\(out\) = 128, "
                                            r"len\(x\) = 256"):
        k.scaled[launch](x, 1, 1, fl.zeros(128))


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_exact_dynamic_shared_memory_is_the_default(backend):
    x, out = fl.asarray(np.arange(256, dtype=np.float32)), fl.zeros(256)
    launch = k.reverse.prepare(256)
    assert launch.shared == 256 and launch.block == (64,)
    k.reverse[launch](x, out)
    np.testing.assert_array_equal(out.numpy(), np.arange(256).reshape(4, 64)[:, ::-1].ravel())


PREPARE = [
    (k.scaled, {"size": 256, "block": 64},
     "block (64,) differs from the contract's exact block (128,)"),
    (k.scaled, {"size": (16, 16)}, "the contract declares a 1-d launch, but the size is 2-d"),
    (k.copy2d, {"size": (40, 40), "block": (32, 16)},
     "block (32, 16) has 512 threads, above the contract's max_threads=256"),
    (k.copy2d, {"size": (40, 40), "shared": 200 * 1024},
     ("the launch asks for 204800 bytes of dynamic shared memory; the contract allows between "
      "0 and 98304")),
    (k.reverse, {"size": 256, "shared": 128},
     "the launch asks for 128 bytes of dynamic shared memory; the contract allows exactly 256"),
]


@pytest.mark.parametrize("kern,kw,message", PREPARE)
def test_prepare_refuses_launches_outside_the_contract(kern, kw, message):
    with pytest.raises(ContractError) as info:
        kern.prepare(kw.pop("size"), **kw)
    assert str(info.value).startswith(f"kernel '{kern.name}': {message}")


def test_prepare_checks_device_shared_memory_and_compute_capability(monkeypatch):
    small = launch_mod.Limits(max_shared_optin=64 * 1024, compute_capability=(7, 5))
    monkeypatch.setattr(launch_mod, "device_limits", lambda backend: small)
    with pytest.raises(ContractError, match="allows 98304 bytes of dynamic shared memory per "
                                            "block; the device gives at most 65536"):
        k.copy2d.prepare((40, 40))
    monkeypatch.setattr(launch_mod, "device_limits",
                        lambda backend: launch_mod.Limits(compute_capability=(7, 5)))
    with pytest.raises(ContractError, match="needs compute capability 8.0; this GPU has 7.5"):
        k.copy2d.prepare((40, 40))


def test_a_prepared_launch_stays_bound_to_its_kernel():
    with pytest.raises(ContractError, match="made for kernel 'scaled'"):
        k.reverse[k.scaled.prepare(256)]


DECORATION = [
    ({"dims": 4, "block": (8, 8, 4, 1)}, "Contract dims must be 1, 2 or 3, got 4"),
    ({"dims": 3, "block": (8, 8, 32)}, "Contract block (8, 8, 32) has 2048 threads"),
    ({"dims": 1}, "a Contract needs block=(...) (exact) or max_threads=N"),
    ({"dims": 2, "block": 256}, "Contract block 256 must be 2 positive ints (x first) for dims=2"),
    ({"dims": 1, "block": 512, "max_threads": 256},
     "Contract block (512,) has 512 threads, above max_threads limit 256"),
    ({"dims": 1, "block": 2048}, "Contract block (2048,) has 2048 threads, above the limit 1024"),
    ({"dims": 1, "block": 32, "dynamic_shared": (100, 10)},
     "Contract dynamic_shared (100, 10) must be bytes >= 0, or a (lo, hi) range with lo <= hi"),
    ({"dims": 1, "block": 32, "requires": "len(x) >= n and n > 0"},
     "requires `len(x) >= n and n > 0` must be one comparison, such as len(a) >= n"),
    ({"dims": 1, "block": 32, "requires": "x.size >= n"},
     "requires `x.size >= n`: `x.size` is not allowed"),
    ({"dims": 1, "block": 32, "requires": "len(x) < 1 < 2"},
     "requires `len(x) < 1 < 2` must be one comparison"),
]


@pytest.mark.parametrize("kw,message", DECORATION)
def test_contract_fields_are_checked_when_written(kw, message):
    with pytest.raises(ContractError) as info:
        fl.Contract(**kw)
    assert str(info.value).startswith(message), str(info.value)


def test_requires_may_name_only_parameters():
    with pytest.raises(ContractError) as info:
        @fl.kernel(contract=fl.Contract(dims=1, block=32, requires="len(y) >= m"))
        def bad(x: fl.Slice[fl.f32], n: fl.i64, out: fl.DisjointSlice[fl.f32]):
            out[fl.thread.index_1d()] = x[0]
    assert str(info.value) == ("kernel 'bad': requires `len(y) >= m` names m, y, which are not "
                               "a parameter\nhelp: the parameters are x, n, out")


def test_exact_block_is_reqntid_and_max_threads_is_maxntid_in_ptx():
    text = k.scaled.inspect("ptx", (R1, T.Scalar(fl.i64), T.Scalar(fl.i64), O1))
    assert re.search(r"\.reqntid 128, 1, 1", text)
    text = k.copy2d.inspect("ptx", (R2, O2))
    assert re.search(r"\.maxntid 256", text) and ".reqntid" not in text
    text = k.reverse.inspect("llvm", (R1, O1))
    assert '"nvvm.reqntid"="64,1,1"' in text or "reqntidx" in text


@pytest.mark.gpu
def test_the_driver_enforces_reqntid_even_on_a_raw_launch(backend):
    x, out = fl.asarray(np.arange(256, dtype=np.float32)), fl.zeros(256)
    k.scaled[k.scaled.prepare(256)](x, 16, 16, out)  # loads the kernel
    with pytest.raises(Exception):  # noqa: B017 (the driver's own error type)
        with fl.unsafe():
            k.scaled.launch_raw((4,), (64,), x, 16, 16, out)
        fl.synchronize()


@pytest.mark.gpu
def test_contract_opts_in_to_more_than_48_kb_of_dynamic_shared_memory(backend):
    @fl.kernel(contract=fl.Contract(dims=1, block=128, dynamic_shared=64 * 1024))
    def big(x: fl.Slice[fl.f32], out: fl.DisjointSlice[fl.f32]):
        i = fl.thread.index_1d()
        t = fl.thread.index_in_block()
        buf = fl.shared.dynamic(fl.f32)
        buf[t] = x[i]
        fl.sync_threads()
        out[i] = buf[127 - t] if len(buf) == 16384 else -1.0

    x, out = fl.asarray(np.arange(256, dtype=np.float32)), fl.zeros(256)
    big[big.prepare(256)](x, out)
    np.testing.assert_array_equal(out.numpy(), np.arange(256).reshape(2, 128)[:, ::-1].ravel())
