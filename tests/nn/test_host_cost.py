"""Host cost of eager fearless.nn calls: every call takes the tile fast path once its signature
is known (keyword and defaulted ``ft.Const`` arguments included), the fast path's layout facts
agree with their definition, and torch tensors are wrapped without a DLPack export only where
the export would add nothing (GPU)."""
from __future__ import annotations

import cProfile
import importlib.util
import pstats
import random
from pathlib import Path

import numpy as np
import pytest

import fearless as fl
from fearless import tile as ft
from fearless.kernel import params as P
from fearless.kernel import tile_fast

_BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_nn_host.py"
# Python function calls per nn call on the cuda fast path (measured 290-1300 with the small
# shapes; a call that misses the fast path costs thousands to a hundred thousand)
CALL_BUDGET = 2000


def _bench():
    spec = importlib.util.spec_from_file_location("bench_nn_host", _BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_nn_call_takes_the_fast_path(backend):
    """Second calls of each nn function never bind arguments the slow way (rope, argmax,
    attention and decode_attention passed ft.Const arguments by keyword or left their
    defaults, and ran the slow path on every call)."""
    bench = _bench()
    a = bench._inputs(bench.SMALL, bench._numpy_make(np.random.default_rng(0)))
    with bench.cuda_fast_path_stub() as slow:
        for name, f in bench.cases(a):
            f()
            slow[0] = 0
            pr = cProfile.Profile()
            pr.enable()
            f()
            pr.disable()
            assert slow[0] == 0, name
            assert pstats.Stats(pr).total_calls < CALL_BUDGET, name


@ft.kernel
def _scaled(y: ft.Out, x: ft.In, s: ft.Const[int] = 2, t: ft.Const[int] = 3):
    y.store(ft.load_like(x, y) * (s + t))


def test_positional_binding_matches_bind():
    params = _scaled.params
    for args, kwargs in [((1, 2), {}), ((1, 2), {"t": 5}), ((1,), {"x": 2, "s": 7}),
                         ((1, 2, 4, 5), {})]:
        assert _scaled._positional(args, kwargs) == P.bind("_scaled", params, args, kwargs)
    for args, kwargs in [((1, 2), {"u": 1}), ((1, 2, 3), {"s": 1}), ((1,), {}),
                         ((1, 2, 3, 4, 5), {})]:
        assert _scaled._positional(args, kwargs) is None   # bind's errors: the slow path


def test_keyword_consts_run_as_positional(backend):
    x = fl.asarray(np.arange(8, dtype=np.float32))
    y = _scaled(fl.empty((8,), fl.f32).partition((8,)), x, t=10).sync()[0].unpartition()
    np.testing.assert_array_equal(y.numpy(), np.arange(8, dtype=np.float32) * 12)


@pytest.mark.gpu
def test_repeat_calls_with_keyword_default_and_positional_consts_get_their_own_values(backend):
    """On cuda a repeat call takes a saved plan keyed by its constants: each spelling of the
    constants must find the plan compiled for its values (a review: the CPU test cannot see a
    wrong plan, since the cpu backend has no fast path)."""
    xh = np.arange(8, dtype=np.float32)
    x = fl.asarray(xh)
    _scaled._plans.clear()                  # plans other tests saved do not count
    calls = [((), {"t": 10}, 12), ((), {}, 5), ((1, 1), {}, 2), ((), {"s": 4}, 7),
             ((), {"t": 10}, 12), ((2, 3), {}, 5), ((), {}, 5), ((1, 1), {}, 2)]
    for args, kwargs, factor in calls:      # each twice or more: the repeats use the plans
        y = _scaled(fl.empty((8,), fl.f32).partition((8,)), x, *args, **kwargs)
        got = y.sync()[0].unpartition().numpy()
        np.testing.assert_array_equal(got, xh * factor, err_msg=f"{args} {kwargs}")
    assert len(_scaled._plans) == 4         # (2, 10), (2, 3), (1, 1), (4, 3)


def _reference_facts(view):
    shape, strides = view[2], view[3]
    if any(abs(n) >= tile_fast.INDEX_LIMIT for n in (*shape, *strides)):
        return None
    return (tile_fast.pow2_div(view[1]), tuple(map(tile_fast.pow2_div, shape)),
            tuple(map(tile_fast.pow2_div, strides)),
            len(shape) > 0 and (strides[-1] == 1 or shape[-1] == 1))


def test_layout_facts_match_their_definition():
    rng = random.Random(0)
    extents = [0, 1, 2, 3, 6, 8, 12, 48, 64, 100, 1 << 31]
    strides = [0, 1, -1, -4, 2, 3, 6, 8, 12, 96, 1 << 31, -(1 << 31), -(1 << 31) + 1]
    for _ in range(20000):
        r = rng.randint(0, 3)
        view = (None, rng.choice([0, 1, 2, 16, 32, 12296]),
                tuple(rng.choice(extents) for _ in range(r)),
                tuple(rng.choice(strides) for _ in range(r)))
        assert tile_fast.layout_facts(view) == _reference_facts(view), view


def test_partition_handles_keep_the_layout_facts(backend):
    t = fl.asarray(np.ones((6, 8), np.float32))[1:5]
    facts = t._layout()
    part = t.partition((2, 8))
    assert part._tensor._facts == facts
    fresh = part.unpartition()
    assert fresh._layout() == facts and fresh.byte_extent() == facts[1]
    assert fresh.data_ptr() == part._tensor._base_ptr + part._tensor.offset * 4


# -- GPU: torch tensors read through their attributes -------------------------------------------
@pytest.mark.gpu
def test_torch_wrap_matches_dlpack(backend):
    torch = pytest.importorskip("torch")
    from fearless.runtime import interop, memory, tensor

    base = torch.randn(6, 10, device="cuda").to(torch.bfloat16)
    for x in (base, base[1:5, 2:9], base.T, base[:, 3]):
        fast = tensor._from_torch(x)
        f = interop.view_foreign(x, memory.cuda_stream().handle)
        ref = tensor._over(f.ptr, f.shape, f.strides, f.dtype, "cuda", f.owner, f.readonly)
        assert fast is not None and fast._owner is x
        assert (fast.shape, fast.strides, fast.dtype, fast.data_ptr(), fast.byte_extent(),
                fast.readonly) == (ref.shape, ref.strides, ref.dtype, ref.data_ptr(),
                                   ref.byte_extent(), ref.readonly)
    assert tensor._from_torch(base.float().requires_grad_()) is None   # DLPack decides
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):          # fearless's current stream follows torch's
        assert tensor._from_torch(base) is not None
        with fl.stream(fl.Stream()):       # now they differ: the DLPack export orders them
            assert tensor._from_torch(base) is None
    with fl.stream(fl.Stream()):
        assert tensor._from_torch(base) is None


@pytest.mark.gpu
def test_linear_torch_in_torch_out_on_a_torch_stream(backend):
    torch = pytest.importorskip("torch")
    from fearless import nn
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(3, 64, device="cuda", generator=g).to(torch.bfloat16)
    w = torch.randn(32, 64, device="cuda", generator=g).to(torch.bfloat16)
    ref = (x.double() @ w.double().T)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())   # x and w were made on the default stream
    for stream in (torch.cuda.current_stream(), side):
        with torch.cuda.stream(stream):
            y = nn.linear(x, w)
        torch.cuda.synchronize()
        assert isinstance(y, torch.Tensor) and y.dtype == torch.bfloat16
        bound = 64 * 2.0**-23 * (x.double().abs() @ w.double().abs().T) + \
            ref.abs() * 2.0**-8
        assert ((y.double() - ref).abs() <= bound).all()
