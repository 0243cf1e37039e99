"""Greedy generation: prefill into a preallocated KV cache, then one captured decode step
replayed per token.

State in device memory, per (batch, max_ctx), kept by the model between calls:
    k/v caches  (B, max_ctx, Hkv, D) per layer
    ids         (B,) int32   the token each sequence feeds next
    pos         (B,) int32   its position (= the cache row its k, v go to)
    lens        (B,) int32   pos + 1: the rows decode attention reads
    tokens      (B, max_ctx + 1) int32: each whole sequence, prompt included (the last new
                token is never fed back, so the sequence is one longer than the cache)
One decode step (model.decode, argmax, kernels.record_and_advance) reads and advances only this
state, so it is captured once per call with ``fl.capture()`` and replayed for every later token;
the tokens come back to the host once, at the end. The graph pins the caches, which the next
call's prefill writes through a partition, so each call releases the previous call's graph and
captures its own (a capture costs about one eager step on the host).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

import fearless as fl
from fearless import nn
from fearless.errors import ModelInputError
from fearless.models import kernels

_CTX_STEP = 256  # the default max_ctx is rounded up to this, so calls of similar lengths share
#                  one cache and one captured step


@dataclass
class Decoder:
    """The device state of one (batch, max_ctx) and its captured decode step."""

    cache: object
    ids: fl.Tensor
    pos: fl.Tensor
    lens: fl.Tensor
    tokens: fl.Tensor
    graph: object = None     # the captured decode step
    warm: bool = False       # a step ran eagerly: every kernel is compiled
    held: object = None      # the captured step's last result, kept alive with the graph


def generate(model, prompt_ids, max_new_tokens: int, max_ctx: int | None = None) -> np.ndarray:
    """``max_new_tokens`` greedy tokens after each prompt: (B, P) ids -> int32 (B, N) array.

    ``max_ctx``: KV-cache rows per sequence; default P + N - 1 rounded up to a multiple of 256,
    at most the model's max_position_embeddings. Every check runs before anything is
    launched; raises ModelInputError for: ids outside the vocabulary or a ragged batch, a prompt
    longer than the context, ``max_new_tokens`` < 1, and a KV cache that cannot hold the
    sequence (P + N - 1 rows: the last new token is never fed back). ``model.timing`` gets the
    prefill and decode seconds and token counts, and ``graph``: whether decode steps replayed
    a captured step (from the second step of a call; the third of the first call, whose first
    step compiles the kernels eagerly).
    """
    c = model.config
    prompt = model.check_ids(prompt_ids, "prompt_ids")
    batch, plen = prompt.shape
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)) \
            or max_new_tokens < 1:
        raise ModelInputError(f"max_new_tokens is {max_new_tokens!r}; expected an integer >= 1")
    need = plen + int(max_new_tokens) - 1
    if max_ctx is None:
        max_ctx = default_max_ctx(model, plen, max_new_tokens)
    if need > max_ctx or need > c.max_position_embeddings:
        limit = min(max_ctx, c.max_position_embeddings)
        raise ModelInputError(
            f"the KV cache holds {limit} tokens per sequence, and a prompt of {plen} with "
            f"{max_new_tokens} new tokens needs {need}",
            help=f"ask for at most {limit - plen + 1} new tokens" if limit >= plen else None)
    dec = _decoder(model, batch, int(max_ctx))
    _release(dec)
    start = time.perf_counter()
    _prefill(model, dec, prompt)
    fl.synchronize()
    prefilled = time.perf_counter()
    for _ in range(max_new_tokens - 1):
        _step(model, dec)
    out = dec.tokens.numpy()[:, plen:plen + max_new_tokens]  # synchronises
    done = time.perf_counter()
    model.timing = {"prefill_s": prefilled - start, "prefill_tokens": batch * plen,
                    "decode_s": done - prefilled, "decode_tokens": batch * (max_new_tokens - 1),
                    "graph": dec.graph is not None}
    return out


def default_max_ctx(model, prompt_len: int, max_new_tokens: int) -> int:
    """KV-cache rows for a prompt and a number of new tokens: P + N - 1 rounded up to a
    multiple of 256, at most max_position_embeddings."""
    need = prompt_len + max_new_tokens - 1
    return min(-(-need // _CTX_STEP) * _CTX_STEP, model.config.max_position_embeddings)


def _decoder(model, batch: int, max_ctx: int) -> Decoder:
    key = (batch, max_ctx)
    if key not in model._decoders:
        free(model)  # one set of caches at a time: they are the big allocation
        model._decoders[key] = Decoder(
            cache=model.new_cache(batch, max_ctx), ids=fl.zeros(batch, fl.i32),
            pos=fl.zeros(batch, fl.i32), lens=fl.zeros(batch, fl.i32),
            tokens=fl.full((batch, max_ctx + 1), -1, fl.i32))
    return model._decoders[key]


def free(model) -> None:
    """Release the model's captured steps and drop its KV caches."""
    for dec in model._decoders.values():
        _release(dec)
    model._decoders.clear()


def _prefill(model, dec: Decoder, prompt: np.ndarray) -> None:
    """Prompt through the model into the cache; the first new token into the state."""
    batch, plen = prompt.shape
    _upload(dec.tokens, np.pad(prompt, ((0, 0), (0, dec.tokens.shape[1] - plen)),
                               constant_values=-1))
    _upload(dec.pos, np.full(batch, plen - 1, np.int32))
    _upload(dec.lens, np.full(batch, plen, np.int32))
    logits = model.prefill(fl.asarray(prompt.reshape(-1)), batch, plen, dec.cache,
                           last_only=True)
    kernels.record_and_advance(nn.argmax(logits), dec.ids, dec.pos, dec.lens, dec.tokens)


def _step(model, dec: Decoder) -> None:
    """One decode token: eager the first time ever (every kernel compiles), then captured with
    ``fl.capture()`` at the first step of each call and replayed for the rest."""
    if dec.graph is not None:
        dec.graph.replay()
        return
    if not dec.warm:
        _decode_step(model, dec)
        dec.warm = True
        return
    with fl.capture() as graph:
        dec.held = _decode_step(model, dec)
    dec.graph = graph
    graph.replay()


def _release(dec: Decoder) -> None:
    """End the captured step: the graph pins the caches (no partition while it lives), and the
    next prefill's KV-cache write partitions them."""
    if dec.graph is not None:
        dec.graph.release()
        dec.graph, dec.held = None, None


def _decode_step(model, dec: Decoder):
    logits = model.decode(dec.ids, dec.pos, dec.lens, dec.cache)
    next_ids = nn.argmax(logits)
    kernels.record_and_advance(next_ids, dec.ids, dec.pos, dec.lens, dec.tokens)
    return next_ids


def _upload(t: fl.Tensor, host: np.ndarray) -> None:
    """Overwrite ``t`` with ``host`` (same shape and dtype) in place, with a copy kernel (the
    captured step holds ``t``'s address)."""
    kernels.copy_into(fl.asarray(np.ascontiguousarray(host, t.dtype.numpy)), t)
