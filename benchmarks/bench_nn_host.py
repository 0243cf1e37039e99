"""Host cost of one eager ``fearless.nn`` call: microseconds and Python function calls per call.

A model's prefill and decode are host-bound when each nn call costs more host time than its
kernels take on the GPU (5-20 us for a decode step's kernels). For each function (linear at T=1
and T=2048, rms_norm, rms_norm with a residual, rope, silu_mul, add, embedding, argmax,
attention, decode_attention) this prints the wall time of a call (the GPU kept out of it: N calls
back to back, then one synchronise outside the timing; the median of several repetitions) and the
function calls per call that cProfile counts (Python and built-in), with fearless tensors and
with torch tensors, beside the host cost of the matching torch op.

Run on the GPU machine from a checkout:  PYTHONPATH=src python3 benchmarks/bench_nn_host.py
``--stub`` (no GPU needed, the cpu backend): the call counts of the cuda fast path with the
driver left out. Each tile kernel acts as if it ran on cuda with a plan for every signature (a
TilePlan over a stand-in cubin; ``pack.launch`` does nothing), so what is counted is the nn
function, its checks, its outputs, partitions, the tile fast path and the DeviceOperation's
ownership bookkeeping: everything but the driver call and cuda memory allocation. A call that
misses the fast path (keyword arguments, say) runs the cpu slow path instead and shows as a
large count. Times in ``--stub`` mode are cpu times of that emulation, not GPU host costs.
"""
from __future__ import annotations

import argparse
import contextlib
import cProfile
import pstats
import statistics
import sys
import time

import numpy as np

import fearless as fl
from fearless import nn

SHAPES = dict(hidden=2048, inter=6144, heads=16, kv_heads=8, head_dim=128, vocab=32768,
              ctx=1024, prefill=2048)
SMALL = dict(hidden=64, inter=96, heads=4, kv_heads=2, head_dim=64, vocab=128, ctx=64,
             prefill=32)


def _inputs(s: dict, make):
    """The arguments of every case, made by ``make(shape, dtype_name, kind)`` (kind: "randn",
    "ids", "positions", "lengths")."""
    h, hd, hq, hk = s["hidden"], s["head_dim"], s["heads"], s["kv_heads"]
    t = s["prefill"]
    a = {}
    a["x1"], a["x"] = make((1, h), "bf16", "randn"), make((t, h), "bf16", "randn")
    a["w"] = make((s["inter"], h), "bf16", "randn")
    a["nw"] = make((h,), "bf16", "randn")
    a["res"] = make((t, h), "bf16", "randn")
    a["q"], a["k"] = make((t, hq, hd), "bf16", "randn"), make((t, hk, hd), "bf16", "randn")
    a["cos"], a["sin"] = make((s["ctx"] * 4, hd // 2), "f32", "randn"), \
        make((s["ctx"] * 4, hd // 2), "f32", "randn")
    a["pos"] = make((t,), "i32", "positions")
    a["g"], a["u"] = make((t, s["inter"]), "bf16", "randn"), make((t, s["inter"]), "bf16", "randn")
    a["ids"] = make((t,), "i32", "ids")
    a["table"] = make((s["vocab"], h), "bf16", "randn")
    a["logits"] = make((16, s["vocab"]), "bf16", "randn")
    a["aq"] = make((1, t, hq, hd), "bf16", "randn")
    a["ak"], a["av"] = make((1, t, hk, hd), "bf16", "randn"), make((1, t, hk, hd), "bf16", "randn")
    a["dq"] = make((16, hq, hd), "bf16", "randn")
    a["kc"], a["vc"] = make((16, s["ctx"], hk, hd), "bf16", "randn"), \
        make((16, s["ctx"], hk, hd), "bf16", "randn")
    a["lens"] = make((16,), "i32", "lengths")
    return a


def cases(a: dict) -> list:
    """(name, fearless.nn call) pairs over the arguments ``a``."""
    return [
        ("linear T=1", lambda: nn.linear(a["x1"], a["w"])),
        ("linear T=prefill", lambda: nn.linear(a["x"], a["w"])),
        ("rms_norm", lambda: nn.rms_norm(a["x"], a["nw"], 1e-6)),
        ("rms_norm+residual", lambda: nn.rms_norm(a["x"], a["nw"], 1e-6, a["res"])),
        ("rope", lambda: nn.rope(a["q"], a["k"], a["cos"], a["sin"], a["pos"])),
        ("silu_mul", lambda: nn.silu_mul(a["g"], a["u"])),
        ("add", lambda: nn.add(a["x"], a["res"])),
        ("embedding", lambda: nn.embedding(a["ids"], a["table"])),
        ("argmax", lambda: nn.argmax(a["logits"])),
        ("attention", lambda: nn.attention(a["aq"], a["ak"], a["av"])),
        ("decode_attention", lambda: nn.decode_attention(a["dq"], a["kc"], a["vc"], a["lens"])),
    ]


def torch_cases(a: dict) -> dict:
    """The matching torch op of each case (its host cost is the bar), by case name."""
    import torch
    import torch.nn.functional as F
    return {
        "linear T=1": lambda: F.linear(a["x1"], a["w"]),
        "linear T=prefill": lambda: F.linear(a["x"], a["w"]),
        "rms_norm": lambda: F.rms_norm(a["x"], (a["x"].shape[-1],), a["nw"], 1e-6),
        "rms_norm+residual": lambda: F.rms_norm(a["x"] + a["res"], (a["x"].shape[-1],),
                                                a["nw"], 1e-6),
        "rope": lambda: a["q"] * a["q"],   # one elementwise op: rope is several in HF
        "silu_mul": lambda: F.silu(a["g"]) * a["u"],
        "add": lambda: a["x"] + a["res"],
        "embedding": lambda: F.embedding(a["ids"], a["table"]),
        "argmax": lambda: torch.argmax(a["logits"], dim=-1),
        "attention": lambda: F.scaled_dot_product_attention(
            a["aq"].transpose(1, 2), a["ak"].transpose(1, 2), a["av"].transpose(1, 2),
            is_causal=True, enable_gqa=True),
        "decode_attention": lambda: F.scaled_dot_product_attention(
            a["dq"][:, :, None], a["kc"].transpose(1, 2), a["vc"].transpose(1, 2),
            enable_gqa=True),
    }


def host_us(f, sync, n: int, reps: int = 5) -> float:
    """Median over ``reps`` of the wall time of ``n`` calls of ``f`` back to back, per call."""
    f()
    sync()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(n):
            f()
        times.append((time.perf_counter() - t0) / n * 1e6)
        sync()
    return statistics.median(times)


def calls_per_call(f, sync, n: int = 20) -> float:
    """Function calls (Python and built-in) cProfile counts per call of ``f``."""
    f()
    sync()
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(n):
        f()
    pr.disable()
    sync()
    return pstats.Stats(pr).total_calls / n


def _numpy_make(rng):
    def make(shape, dt, kind):
        if kind == "randn":
            host = rng.standard_normal(shape).astype(np.float32)
            return fl.asarray(host, dt) if dt != "f32" else fl.asarray(host)
        n = shape[0]
        if kind == "ids":
            return fl.asarray(rng.integers(0, 100, n).astype(np.int32))
        if kind == "positions":
            return fl.asarray(np.arange(n, dtype=np.int32))
        return fl.asarray(np.full(n, 48, dtype=np.int32))
    return make


def _torch_make(torch):
    names = {"bf16": torch.bfloat16, "f32": torch.float32, "i32": torch.int32}

    def make(shape, dt, kind):
        if kind == "randn":
            return torch.randn(shape, device="cuda").to(names[dt])
        n = shape[0]
        if kind == "ids":
            return torch.randint(0, 100, (n,), device="cuda", dtype=torch.int32)
        if kind == "positions":
            return torch.arange(n, device="cuda", dtype=torch.int32)
        return torch.full((n,), 900, device="cuda", dtype=torch.int32)
    return make


# -- --stub: the cuda fast path on the cpu backend, the driver left out ---------------------------
@contextlib.contextmanager
def cuda_fast_path_stub():
    """While the block runs, every tile kernel takes the cuda fast path on the cpu backend (see
    the module docstring); ``slow`` (the value yielded) counts the calls that missed it."""
    import types

    from fearless.dtypes import f32, i32
    from fearless.kernel import params as P
    from fearless.kernel import tile, tile_fast
    from fearless.runtime import device, pack

    class Loaded:
        grouped = False
        function = None
        pdl = False
        stream_k = ()

        class params:  # noqa: N801 - stands in for the cubin's parameter packer
            @staticmethod
            def fill(a):
                return a

    class AutoPlans(dict):
        def __init__(self, kernel):
            super().__init__()
            self.kernel = kernel

        def get(self, key, default=None):
            plan = dict.get(self, key)
            if plan is None:
                k = self.kernel
                rt = k.runtime_params
                scalars = {i: (f32 if p.dtype is None or getattr(p.dtype, "is_float", True)
                               else i32) for i, p in enumerate(rt) if p.kind is P.SCALAR}
                plan = self[key] = tile_fast.TilePlan(k.name, rt, Loaded, scalars)
            return plan

    shim = types.SimpleNamespace(**{n: getattr(device, n) for n in dir(device)
                                    if not n.startswith("__")})
    shim._chosen = "cuda"
    real_call, real_launch, real_bind = tile.TileKernel.__call__, pack.launch, P.bind
    touched, slow = [], [0]

    def call(self, *args, **kwargs):
        if type(self._plans) is not AutoPlans:
            touched.append((self, self._plans))
            self._plans = AutoPlans(self)
        return real_call(self, *args, **kwargs)

    def bind(*args):
        slow[0] += 1
        return real_bind(*args)
    tile.device, pack.launch, tile.TileKernel.__call__, P.bind = \
        shim, (lambda *a: None), call, bind
    try:
        yield slow
    finally:
        tile.device, pack.launch, tile.TileKernel.__call__, P.bind = \
            device, real_launch, real_call, real_bind
        for k, plans in touched:
            k._plans = plans


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stub", action="store_true", help="cpu backend, cuda fast path emulated")
    ap.add_argument("-n", type=int, default=200, help="calls per timing")
    ap.add_argument("--only", default="", help="comma-separated case names")
    ap.add_argument("--small", action="store_true", help="--stub with tiny shapes")
    opts = ap.parse_args()
    only = set(filter(None, opts.only.split(",")))
    rows = []
    if opts.stub:
        fl.set_backend("cpu")
        a = _inputs(SMALL if opts.small else SHAPES, _numpy_make(np.random.default_rng(0)))
        with cuda_fast_path_stub():
            for name, f in cases(a):
                if only and name not in only:
                    continue
                rows.append((name, host_us(f, fl.synchronize, opts.n),
                             calls_per_call(f, fl.synchronize)))
        print(f"{'case (stub: cuda fast path, no driver)':40s} {'cpu us/call':>12s} {'calls/call':>11s}")
        for name, us, calls in rows:
            print(f"{name:40s} {us:12.1f} {calls:11.0f}")
        return
    import torch
    fl.set_backend("cuda")

    def sync():
        fl.synchronize()
        torch.cuda.synchronize()
    ta = _inputs(SHAPES, _torch_make(torch))
    fa = {k: fl.asarray(v) for k, v in ta.items()}
    peers = torch_cases(ta)
    print(f"{'case':22s} {'fl us':>8s} {'fl calls':>9s} {'torch-in us':>12s} "
          f"{'torch-in calls':>15s} {'torch op us':>12s}", flush=True)
    for (name, ff), (_, tf) in zip(cases(fa), cases(ta)):
        if only and name not in only:
            continue
        row = (host_us(ff, sync, opts.n), calls_per_call(ff, sync), host_us(tf, sync, opts.n),
               calls_per_call(tf, sync), host_us(peers[name], sync, opts.n))
        print(f"{name:22s} {row[0]:8.1f} {row[1]:9.0f} {row[2]:12.1f} {row[3]:15.0f} "
              f"{row[4]:12.1f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
