"""Launch contracts, alias checks, raw launches and the JIT cache (host side; GPU-free)."""
from __future__ import annotations

import sys
import textwrap

import numpy as np
import pytest

import fearless as fl
from fearless import f32, u8
from fearless.config import Config
from fearless.errors import AliasError, ArgumentTypeError, ContractError, LaunchError
from fearless.ir import types as T
from tests.support import import_source


@fl.kernel
def add(x: fl.Slice[f32], y: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = x[i] + y[i]


@fl.kernel
def add2d(x: fl.Array[f32, 2], out: fl.DisjointArray[f32, 2]):
    r, c = fl.thread.index_2d()
    if r < out.shape[0] and c < out.shape[1]:
        out[r, c] = x[r, c] * 2.0


@fl.kernel
def bump(k: u8, out: fl.DisjointSlice[u8]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = k


def test_prepare_picks_blocks_and_covers_the_problem():
    one = add.prepare(1000)
    assert (one.size, one.grid, one.block, one.dims) == ((1000,), (4,), (256,), 1)
    two = add2d.prepare((100, 70))
    assert (two.grid, two.block) == ((3, 13), (32, 8))  # x along the 70 columns
    assert add.prepare(1000, block=128).grid == (8,)
    assert add.prepare(0).grid == (0,)


def test_prepared_launch_computes_correct_2d_result():
    x = np.random.default_rng(0).standard_normal((37, 91)).astype(np.float32)
    out = fl.full((37, 91), np.nan, f32)
    add2d[add2d.prepare((37, 91), block=(16, 4))](fl.asarray(x), out)
    assert np.array_equal(out.numpy(), x * 2)


def test_writable_arguments_may_not_overlap_anything():
    buf = fl.zeros(20)
    x = fl.asarray(np.arange(20, dtype=np.float32))
    launch = add.prepare(10)
    for xs, ys, out in [(x[:10], buf[5:15], buf[:10]),      # partial overlap with y
                        (x[:10], x[10:], x[::-1][10:]),       # a reversed view of x's first half
                        (buf[::2], x[:10], buf[1::2])]:      # interleaved views of one buffer
        with pytest.raises(AliasError):
            add[launch](xs, ys, out)
    sq = fl.zeros((4, 4))
    with pytest.raises(AliasError):
        add2d[add2d.prepare((4, 4))](sq.T, sq)  # a transposed view of the output
    broadcast = fl.asarray(np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), (10,), (0,)))
    with pytest.raises(AliasError, match="share memory"):
        add[launch](x[:10], x[10:], broadcast)


def test_read_only_arguments_may_share_memory_and_disjoint_views_are_fine():
    buf = fl.asarray(np.arange(30, dtype=np.float32))
    add[add.prepare(10)](buf[:10], buf[:10], buf[10:20])  # x and y are the same tensor
    add[add.prepare(10)](buf[:10], buf[20:], buf[10:20])
    assert np.array_equal(buf.numpy()[10:20], np.arange(10) + np.arange(20, 30))


def test_a_refused_launch_writes_nothing():
    out = fl.full(10, 7.0, f32)
    with pytest.raises(AliasError):
        add[add.prepare(10)](out, fl.zeros(10), out)
    assert np.array_equal(out.numpy(), np.full(10, 7.0, np.float32))


def test_arguments_are_checked_by_type():
    with pytest.raises(ArgumentTypeError, match="does not fit u8"):
        bump[bump.prepare(4)](300, fl.zeros(4, u8))
    with pytest.raises(ArgumentTypeError, match="not an array"):
        add[add.prepare(4)]([1, 2, 3, 4], fl.zeros(4), fl.zeros(4))
    with pytest.raises(TypeError):  # ArgumentTypeError is a TypeError too
        add[add.prepare(4)](fl.zeros(4), fl.zeros(4, fl.f64), fl.zeros(4))
    with pytest.raises(ArgumentTypeError, match="got the float 2.9 for a u8 parameter"):
        bump[bump.prepare(4)](2.9, fl.zeros(4, u8))  # never truncated silently
    with pytest.raises(ArgumentTypeError, match="expects a scalar, got str"):
        bump[bump.prepare(4)]("3", fl.zeros(4, u8))
    frozen = np.zeros(4, np.uint8)
    frozen.flags.writeable = False
    with pytest.raises(ArgumentTypeError, match="read-only"):
        bump[bump.prepare(4)](1, frozen)
    out = fl.zeros(4, u8)
    bump[bump.prepare(4)](np.uint8(9), out)
    assert out.numpy().tolist() == [9, 9, 9, 9]


def test_kernels_launch_only_through_a_prepared_launch_or_unsafe():
    x, out = fl.ones(8), fl.zeros(8)
    with pytest.raises(LaunchError, match="PreparedLaunch"):
        add(x, x, out)
    with pytest.raises(LaunchError, match="takes a PreparedLaunch"):
        add[8](x, x, out)
    with pytest.raises(LaunchError, match="fl.unsafe"):
        add.launch_raw(1, 8, x, x, out)
    with fl.unsafe():
        add.launch_raw(2, 4, x, x, out)  # raw geometry, still alias-checked
        with pytest.raises(AliasError):
            add.launch_raw(2, 4, x, x, x)
    assert np.array_equal(out.numpy(), np.full(8, 2.0, np.float32))


def test_a_launch_prepared_for_another_backend_is_refused():
    launch = add.prepare(4)
    forged = type(launch)(add, "cuda", launch.size, launch.grid, launch.block)
    with pytest.raises(ContractError, match="prepared for the cuda backend"):
        add[forged](fl.zeros(4), fl.zeros(4), fl.zeros(4))


def _module(path, name, helper_body):
    path.write_text(textwrap.dedent(f"""
        import fearless as fl
        from fearless import f32

        @fl.func
        def helper(v):
            return {helper_body}

        @fl.kernel
        def k(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
            i = fl.thread.index_1d()
            if i < len(out):
                out[i] = helper(x[i])
        """))
    return import_source(path, name)


def test_disk_cache_hits_and_editing_a_helper_recompiles(tmp_path, monkeypatch):
    kernel_module = sys.modules["fearless.kernel.base"]  # the module, not the decorator
    from fearless.runtime.module import nvjitlink_version
    if nvjitlink_version() == "unavailable":
        pytest.skip("nvJitLink is needed to build cubins")
    monkeypatch.setattr(kernel_module, "CONFIG", Config(None, tmp_path / "cache", True,
                                                        frozenset()))
    types = (T.Array(f32, 1, T.Access.READ, True), T.Array(f32, 1, T.Access.DISJOINT, True))
    first = _module(tmp_path / "m1.py", "m1", "v * 2.0").k
    compiled = first.compile_for(types, "cuda", "sm_90")
    entries = lambda: sorted(p.name for p in (tmp_path / "cache").rglob("*.entry"))
    assert len(entries()) == 1 and compiled.cubin

    again = _module(tmp_path / "m1.py", "m1b", "v * 2.0").k  # same source: a disk hit
    monkeypatch.setattr(sys.modules["fearless.kernel.simt"], "compile_simt",
                        lambda *a, **k: pytest.fail("recompiled"))
    hit = again.compile_for(types, "cuda", "sm_90")
    assert hit.cubin == compiled.cubin
    assert hit.info.bounds_preconditions == (("x", 0, "out", 0),)  # x[i]: proven, no sites
    monkeypatch.undo()
    monkeypatch.setattr(kernel_module, "CONFIG", Config(None, tmp_path / "cache", True,
                                                        frozenset()))
    edited = _module(tmp_path / "m2.py", "m2", "v * 3.0").k  # the helper changed
    edited.compile_for(types, "cuda", "sm_90")
    assert len(entries()) == 2


def test_a_changed_compiler_does_not_reuse_the_disk_cache(tmp_path, monkeypatch):
    from fearless.runtime import cache
    from fearless.runtime.module import nvjitlink_version
    if nvjitlink_version() == "unavailable":
        pytest.skip("nvJitLink is needed to build cubins")
    kernel_module = sys.modules["fearless.kernel.base"]
    monkeypatch.setattr(kernel_module, "CONFIG", Config(None, tmp_path / "cache", True,
                                                        frozenset()))
    types = (T.Array(f32, 1, T.Access.READ, True), T.Array(f32, 1, T.Access.DISJOINT, True))
    entries = lambda: sorted(p.name for p in (tmp_path / "cache").rglob("*.entry"))  # noqa: E731
    _module(tmp_path / "f1.py", "f1", "v * 5.0").k.compile_for(types, "cuda", "sm_90")
    monkeypatch.setattr(cache, "compiler_fingerprint", lambda: "another compiler")
    _module(tmp_path / "f1.py", "f1b", "v * 5.0").k.compile_for(types, "cuda", "sm_90")
    assert len(entries()) == 2  # the same kernel source, compiled again


def test_cache_key_tells_apart_globals_bound_to_different_functions(tmp_path):
    keys = []
    for name, fn in (("ka", "math.acos"), ("kb", "math.acosh")):
        path = tmp_path / f"{name}.py"
        path.write_text(textwrap.dedent(f"""
            import math
            import fearless as fl
            fn = {fn}

            @fl.kernel
            def k(x: fl.Slice[fl.f32], out: fl.DisjointSlice[fl.f32]):
                i = fl.thread.index_1d()
                if i < len(out):
                    out[i] = fn(x[i])
            """))
        module = import_source(path, name)
        keys.append(module.k.fingerprint())
    assert keys[0] != keys[1]


def test_parameter_buffer_follows_the_ptx_parameter_layout():
    import ctypes
    import struct
    from types import SimpleNamespace

    from fearless.backends.llvm.lower import abi
    from fearless.runtime.pack import ParamBuffer
    types = (T.Scalar(fl.u8), T.Array(f32, 2, T.Access.READ, False), T.Scalar(fl.f16),
             T.Scalar(f32), T.Scalar(fl.f64))
    fn = SimpleNamespace(params=[SimpleNamespace(type=t) for t in types],
                         attrs={"index_space": 1})
    buf = ParamBuffer(abi(fn, checked=True, coarsen=4))
    # u8 @0, ptr @8, 2 extents @16, 2 strides @32, f16 bits @48, f32 @52, f64 @56, error word
    # @64, thread count @72
    offsets = [p - ctypes.addressof(buf.buffer) for p in buf.pointers]
    assert offsets == [0, 8, 16, 24, 32, 40, 48, 52, 56, 64, 72]
    view = (None, 0xABCDEF, (3, 4), (4, 1))  # key, pointer, shape, strides (runtime/args.py)
    assert buf.fill([7, view, 0x3C00, 1.5, 2.25], 0x1000, 1280) == buf.address
    raw = bytes(buf.buffer)
    assert raw[0] == 7 and struct.unpack_from("<Q", raw, 8)[0] == 0xABCDEF
    assert struct.unpack_from("<4q", raw, 16) == (3, 4, 4, 1)
    assert struct.unpack_from("<H", raw, 48)[0] == 0x3C00
    assert struct.unpack_from("<f", raw, 52)[0] == 1.5 and struct.unpack_from("<d", raw, 56)[0] == 2.25
    assert struct.unpack_from("<Qq", raw, 64) == (0x1000, 1280)


@pytest.mark.gpu
def test_cuda_launches_go_straight_to_the_driver():
    out = fl.zeros(64)
    add[add.prepare(64)](fl.ones(64), fl.ones(64), out)
    assert np.array_equal(out.numpy(), np.full(64, 2.0, np.float32))
    launch = add.prepare(64)
    add[launch](fl.ones(64), fl.ones(64), out)
    (plan,) = launch._plans.values()  # the first launch made the plan the later ones reuse
    plan.shapes = None  # a plan whose shapes were never checked sends launches back ...
    add[launch](fl.ones(64), fl.full(64, 2.0, f32), out)
    assert plan.shapes is None and launch._plans[next(iter(launch._plans))] is not plan
    assert np.array_equal(out.numpy(), np.full(64, 3.0, np.float32))  # ... to the slow path
