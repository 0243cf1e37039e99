"""Counting the kernel launches of one decode step: a diagnostic for benchmarks and tests (the
decode step at batch 1 is a chain of small kernels, so their number matters as much as their
speed).

``counting()`` notes the name of every kernel launched while it is active, on either backend,
by wrapping the runtime's launch points: ``pack.launch`` (the one ``cuLaunchKernel`` of both
tracks on cuda), ``dispatch.launch_cpu`` (SIMT) and ``tile_launch.launch_cpu`` (tile) on the
cpu backend. Those are looked up as module attributes at each launch, so the wrapper sees every
launch made through them, eager or captured. Not thread-safe: for one thread's measurements.
"""
from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator

import numpy as np

import fearless as fl
from fearless.models import generate as greedy
from fearless.runtime import dispatch, pack, tile_launch


@contextlib.contextmanager
def counting() -> Iterator[list]:
    """A list that gets the kernel name of every launch made inside the block, in order."""
    names: list = []
    saved = (pack.launch, dispatch.launch_cpu, tile_launch.launch_cpu)
    cuda_launch, simt_cpu, tile_cpu = saved

    def on_cuda(*args, **kwargs):   # the name is the 7th argument; a tile launch adds pdl
        names.append(kwargs.get("kernel", args[6] if len(args) >= 7 else "?"))
        return cuda_launch(*args, **kwargs)

    def on_simt_cpu(kernel, *args, **kwargs):
        names.append(kernel)
        return simt_cpu(kernel, *args, **kwargs)

    def on_tile_cpu(fn, *args, **kwargs):
        names.append(getattr(fn, "name", "?"))
        return tile_cpu(fn, *args, **kwargs)

    pack.launch, dispatch.launch_cpu, tile_launch.launch_cpu = on_cuda, on_simt_cpu, on_tile_cpu
    try:
        yield names
    finally:
        pack.launch, dispatch.launch_cpu, tile_launch.launch_cpu = saved


def decode_step(model, batch: int = 1, max_ctx: int = 256) -> dict:
    """The kernel launches of one eager decode step of ``model`` (what the captured graph
    replays per token) at ``batch``, on a fresh KV cache of ``max_ctx`` rows (the count does
    not depend on the cache's contents or the length).

    Returns ``{"step": launches of the step, "per_layer": launches of one decoder layer,
    "outside": the rest (embedding, first norm, lm_head, argmax, bookkeeping), "kernels":
    Counter of kernel names over the step}``. Replaces the model's kept decoder state (as a
    ``generate`` of another batch size does).
    """
    dec = greedy._decoder(model, batch, max_ctx)
    greedy._release(dec)
    greedy._upload(dec.lens, np.ones(batch, np.int32))   # the new token's row: one valid row
    greedy._upload(dec.pos, np.zeros(batch, np.int32))
    fl.synchronize()
    per_layer: list = []
    block = model.block

    def counted_block(*args, **kwargs):
        before = len(names)
        out = block(*args, **kwargs)
        per_layer.append(len(names) - before)
        return out

    model.block = counted_block  # the instance attribute shadows the method for this step
    try:
        with counting() as names:
            greedy._decode_step(model, dec)
            fl.synchronize()
    finally:
        del model.block
    layers = sum(per_layer)
    return {"step": len(names), "per_layer": max(per_layer), "outside": len(names) - layers,
            "kernels": Counter(names)}
