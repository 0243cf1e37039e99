"""The small SIMT kernels of the generate loop, beside fearless.nn's: the last row of each
sequence (the only logits a prefill needs), and the per-token bookkeeping a captured decode step
does on the device (record the new token, advance the position, the length and the next input).

Each writes only its own element (DisjointSlice / DisjointArray), so the decode step's state
lives in device memory and one CUDA graph serves every step.
"""
from __future__ import annotations

from typing import TypeVar

import fearless as fl
from fearless import i32

T = TypeVar("T")


@fl.kernel
def last_rows(x: fl.Array[T, 2], seq: i32, out: fl.DisjointArray[T, 2]):
    """out[b, :] = x[b * seq + seq - 1, :]: x (B * seq, H) -> out (B, H)."""
    r, c = fl.thread.index_2d()
    rows, cols = out.shape
    if r < rows and c < cols:
        out[r, c] = x[r * seq + seq - 1, c]


@fl.kernel
def record(next_ids: fl.Slice[i32], lens: fl.Slice[i32], tokens: fl.DisjointArray[i32, 2]):
    """tokens[b, lens[b]] = next_ids[b]: the new token of sequence b lands at its length (the
    row is the whole sequence, prompt included; a length past the row writes nothing)."""
    r, c = fl.thread.index_2d()
    rows, cols = tokens.shape
    if r < rows and c < cols:
        if c == lens[r]:
            tokens[r, c] = next_ids[r]


@fl.kernel
def advance(next_ids: fl.Slice[i32], ids: fl.DisjointSlice[i32], pos: fl.DisjointSlice[i32],
            lens: fl.DisjointSlice[i32]):
    """The next decode step's input: ids = next_ids, pos += 1, lens += 1 (all (B,))."""
    i = fl.thread.index_1d()
    if i < len(ids):
        ids[i] = next_ids[i]
        pos[i] = pos[i] + 1
        lens[i] = lens[i] + 1


@fl.kernel
def copy_rows(src: fl.Array[T, 2], dst: fl.DisjointArray[T, 2]):
    """dst[r, c] = src[r, c]."""
    r, c = fl.thread.index_2d()
    rows, cols = dst.shape
    if r < rows and c < cols:
        dst[r, c] = src[r, c]


def copy_into(src, dst) -> None:
    """Copy ``src`` into ``dst`` (same shape, 1-d or 2-d, same dtype) in place."""
    if dst.ndim == 1:
        src, dst = src.reshape((1, src.shape[0])), dst.reshape((1, dst.shape[0]))
    copy_rows[copy_rows.prepare(dst.shape)](src, dst)


def take_last(x, batch: int, seq: int):
    """The rows ``b * seq + seq - 1`` of ``x`` (batch * seq, H) as a new (batch, H) tensor."""
    out = fl.empty((batch, x.shape[1]), x.dtype)
    last_rows[last_rows.prepare((batch, x.shape[1]))](x, seq, out)
    return out


def record_and_advance(next_ids, ids, pos, lens, tokens) -> None:
    """Append ``next_ids`` (B,) to ``tokens`` at ``lens`` and advance the step's state."""
    record[record.prepare(tokens.shape)](next_ids, lens, tokens)
    advance[advance.prepare(ids.shape[0])](next_ids, ids, pos, lens)
