"""Stream-K's three launches timed one by one on the GPU (issue 13): where a stream-K call's
time goes, against ``ft.persistent()``, for several smallest shares.

For each shape (f16, ``examples.tile_gemm.matmul``, bk 64) and each MIN_SHARE (the least
iterations of a share, ``passes/stream_k.py``; ``--tail-split`` sets ``compiler/info.py``'s
TAIL_SPLIT, 1 splits every tail): two untimed calls, then three calls under the torch profiler
(CUPTI device time); the last call's launches are printed in order (whole waves, pieces, fixup;
a call whose tiles make no whole wave has no first launch), with ``ft.persistent()`` once per
shape. Under PDL a launch starts before the one it follows ends, and its time includes the wait:
``FEARLESS_PDL=0`` separates them. MIN_SHARE and TAIL_SPLIT are compile-time constants that the
disk-cache key does not hold, so each pair compiles into its own cache directory under
``$FEARLESS_CACHE_DIR`` (default /tmp/flcache). Results are not checked here
(``tests/tile/test_stream_k.py`` does that on the GPU).

    PYTHONPATH=src:. python3 benchmarks/stream_k_phases.py [--ahead] [--shares 4,16,64]
        [--tail-split N]

``--ahead``: compile every specialisation for sm_90 on a machine without a GPU (tileiras
only), into the same cache directories, to carry to the GPU machine.
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import warnings
from pathlib import Path

import fearless as fl
import fearless.passes.stream_k as stream_k_pass
import fearless.compiler.info as info
from fearless import f16
from fearless import tile as ft
from fearless.runtime import ahead
from examples.tile_gemm import matmul

SHAPES = [((4096, 4096, 4096), (128, 128)), ((8192, 8192, 8192), (128, 128)),
          ((128, 4096, 4096), (128, 128)), ((128, 1024, 4096), (128, 128)),
          ((128, 4096, 4096), (64, 64)), ((4096, 4096, 4096), (128, 256)),
          ((8192, 4096, 14336), (128, 128)), ((8192, 4096, 14336), (128, 256))]
_BASE = importlib.import_module("fearless.kernel.base")


def use_share(share: int, tail: int) -> None:
    """Compile from now on with shares of at least ``share`` iterations and tails split at
    ``1 / tail`` of the blocks or fewer, in their own cache."""
    stream_k_pass.MIN_SHARE, info.TAIL_SPLIT = share, tail
    root = Path(os.environ.get("FEARLESS_CACHE_DIR", "/tmp/flcache"))
    _BASE.CONFIG = dataclasses.replace(_BASE.CONFIG, cache_dir=root / f"share{share}-tail{tail}")


def compile_ahead(shares: list[int], tail: int) -> None:
    with ahead.compile_only(["sm_90"]) as made:
        for share in shares:
            use_share(share, tail)
            kernel = ft.kernel(matmul.fn)   # a fresh kernel: its compiles are not shared
            for (m, n, k), tile in SHAPES:
                a, b = fl.empty((m, k), f16), fl.empty((k, n), f16)
                for sched in (ft.stream_k(), ft.persistent()):
                    kernel(fl.empty((m, n), f16).partition(tile, schedule=sched), a, b, bk=64)
            print(f"shares of {share}: {len(made)} compiles so far", flush=True)


def launches_us(profile, calls: int) -> list[float]:
    """Device microseconds of each launch of the last of ``calls`` profiled calls."""
    times = [e.device_time_total for e in profile.events() if "CUDA" in str(e.device_type)]
    return times[-(len(times) // calls):]


def time_on_gpu(shares: list[int], tail: int) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile
    fl.set_backend("cuda")
    for share in shares:
        use_share(share, tail)
        kernel = ft.kernel(matmul.fn)
        for (m, n, k), tile in SHAPES:
            a = fl.asarray(torch.randn((m, k), device="cuda", dtype=torch.float16))
            b = fl.asarray(torch.randn((k, n), device="cuda", dtype=torch.float16))
            for sched in (ft.stream_k(),) + ((ft.persistent(),) if share == shares[0] else ()):
                c = fl.empty((m, n), f16)
                for _ in range(2):
                    c = kernel(c.partition(tile, schedule=sched), a, b,
                               bk=64).sync()[0].unpartition()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(3):
                        c = kernel(c.partition(tile, schedule=sched), a, b,
                                   bk=64).sync()[0].unpartition()
                    fl.synchronize()
                each = launches_us(prof, 3)
                name = "stream-K" if isinstance(sched, ft.StreamK) else "persistent"
                print(f"share {share:3d} {m}x{n}x{k} {tile[0]}x{tile[1]} {name}: "
                      f"{' + '.join(f'{t:.1f}' for t in each)} = {sum(each):.1f} us",
                      flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ahead", action="store_true")
    parser.add_argument("--shares", default="4,16,64")
    parser.add_argument("--tail-split", type=int, default=info.TAIL_SPLIT,
                        help="split the tail where its tiles are at most 1/N of the blocks "
                             "(1: always)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    shares = [int(s) for s in args.shares.split(",")]
    (compile_ahead if args.ahead else time_on_gpu)(shares, args.tail_split)


if __name__ == "__main__":
    main()
