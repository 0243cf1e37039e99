"""CausalLM: the Llama / Qwen3 decoder stack on fearless.nn, with forward and greedy generate.

One layer, in transformers' order (modeling_llama.py, modeling_qwen3.py), hidden states
token-major (T = batch * seq rows):

    x = rms_norm(h); q | k | v = linear(x, Wqkv)       (q, k, v: column views of one output)
    q, k = rope(q, k, positions)  (Qwen3: of the rms_norm of each head, q_norm and k_norm: one
                                   kernel, nn.qk_norm_rope); k, v to the KV cache; attention
                                   (prefill) or decode attention over the cache
    h = h + linear(attn, Wo);  x = rms_norm(h)        (one fused rms_norm(.., residual=h))
    gate | up = linear(x, Wgate_up);  h = h + linear(silu_mul(gate, up), Wdown)
    logits = linear(rms_norm(h), lm_head)             (lm_head is embed_tokens when tied)

The residual add of each block is fused into the next norm (``rms_norm(x, w, eps, residual)``
returns the normalised value and the new residual), as fearless.nn's contract provides.
Generation lives in generate.py; this module holds the weights and the step functions.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

import fearless as fl
from fearless import dtypes, nn
from fearless.errors import CheckpointError, ModelInputError
from fearless.models import generate as greedy
from fearless.models import kernels
from fearless.models.config import ModelConfig, read_config
from fearless.models.weights import Checkpoint, check_tensors


@dataclass
class Layer:
    """One decoder layer's weights (fearless Tensors; biases and q/k norms may be None).

    ``qkv``: the projection weights whose outputs, side by side, are q | k | v: one fused
    (q_size + 2 * kv_size, hidden) matrix, or (wq, wk, wv) when the model is not fused;
    ``gate_up`` likewise gate | up: one (2 * intermediate, hidden) matrix, or (gate, up). The
    biases follow the same grouping (None without biases).
    """

    input_norm: fl.Tensor
    post_norm: fl.Tensor
    qkv: tuple
    wo: fl.Tensor
    gate_up: tuple
    down: fl.Tensor
    qkv_bias: tuple | None = None
    bo: fl.Tensor | None = None
    gate_up_bias: tuple | None = None
    bdown: fl.Tensor | None = None
    q_norm: fl.Tensor | None = None
    k_norm: fl.Tensor | None = None

    def tensors(self) -> list:
        """Every weight tensor of the layer, once."""
        out = []
        for value in vars(self).values():
            out.extend(value if isinstance(value, tuple) else [] if value is None else [value])
        return out


@dataclass
class KVCache:
    """Per layer (k, v) caches (batch, max_ctx, kv_heads, head_dim) of the model dtype."""

    k: list
    v: list

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.k[0].shape)


def load(path, dtype=None, fuse: bool = True) -> "CausalLM":
    """A CausalLM from a Hugging Face checkpoint directory (config.json + *.safetensors).

    ``dtype``: the activation and weight dtype (``fl.bf16``, ``"f16"``, ``fl.f32``, ...);
    default the dtype of the stored embedding table. Weights stored in another float dtype are
    converted (one rounding). The weights go to the current backend's memory. ``fuse``: keep
    q/k/v and gate/up as one matrix each (see CausalLM).
    Raises CheckpointError: another architecture (naming its ``architectures`` entry), a
    missing or misshapen tensor (naming it and both shapes), a damaged safetensors file, an
    unsupported config; ImportError without the ``safetensors`` package.
    """
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"{path}: not a checkpoint directory")
    config = read_config(path)
    with Checkpoint(path) as ckpt:
        check_tensors(ckpt, config)
        dt = dtypes.coerce(dtype) if dtype is not None else \
            ckpt.stored_dtype("model.embed_tokens.weight")
        if not dt.is_float or dt is dtypes.f64:
            raise CheckpointError(f"{path}: dtype {dt.name} is not supported (bf16, f16, f32)")
        return CausalLM(config, lambda name: fl.asarray(ckpt.read(name, dt)), dt, fuse)


class CausalLM:
    """A loaded causal LM (make one with ``fearless.models.load``).

    Attributes: ``config`` (ModelConfig), ``dtype`` (fearless DType of weights and activations).
    ``forward(ids)`` gives logits; ``generate(prompt_ids, max_new_tokens)`` greedy tokens
    (generate.py).

    Fused (the default): each layer's q, k and v projection weights are copied into one
    (q_size + 2 * kv_size, hidden) matrix at load time, and gate with up into one
    (2 * intermediate, hidden) matrix, so that a step runs one linear for each group (a
    decode GEMV that streams more bytes per launch, and fewer launches); q, k, v and gate, up
    are column views of the group's output, no copies. Each output element is the same dot
    product of the same row of weights as unfused, rounded once. The separate weights are not
    kept.
    """

    def __init__(self, config: ModelConfig, read, dtype: dtypes.DType, fuse: bool = True):
        """``read(name)`` returns the named weight as a fearless Tensor of ``dtype``."""
        self.config, self.dtype, self.fused = config, dtype, fuse
        c = config
        self.embed = read("model.embed_tokens.weight")
        self.norm = read("model.norm.weight")
        self.lm_head = self.embed if c.tie_word_embeddings else read("lm_head.weight")
        self.layers = [self._layer(read, f"model.layers.{n}.") for n in range(c.num_layers)]
        self.cos, self.sin = nn.rope_tables(c.head_dim, c.max_position_embeddings, c.rope_theta,
                                            c.rope_scaling)
        self._decoders: dict = {}   # (batch, max_ctx) -> generate.Decoder
        self.timing: dict = {}      # the last generate's prefill/decode seconds and counts

    def _layer(self, read, p: str) -> Layer:
        c = self.config

        def get(name):
            return read(p + name)

        def group(names, kind):
            parts = [get(f"{n}.{kind}") for n in names]
            return (_stacked(parts),) if self.fused else tuple(parts)

        qkv = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")
        gate_up = ("mlp.gate_proj", "mlp.up_proj")
        layer = Layer(input_norm=get("input_layernorm.weight"),
                      post_norm=get("post_attention_layernorm.weight"),
                      qkv=group(qkv, "weight"), wo=get("self_attn.o_proj.weight"),
                      gate_up=group(gate_up, "weight"), down=get("mlp.down_proj.weight"))
        if c.attention_bias:
            layer.qkv_bias, layer.bo = group(qkv, "bias"), get("self_attn.o_proj.bias")
        if c.mlp_bias:
            layer.gate_up_bias, layer.bdown = group(gate_up, "bias"), get("mlp.down_proj.bias")
        if c.qk_norm:
            layer.q_norm, layer.k_norm = get("self_attn.q_norm.weight"), \
                get("self_attn.k_norm.weight")
        return layer

    def __repr__(self) -> str:
        c = self.config
        return (f"<CausalLM {c.architecture} {c.num_layers} layers, hidden {c.hidden_size}, "
                f"heads {c.num_heads}/{c.num_kv_heads}x{c.head_dim}, vocab {c.vocab_size}, "
                f"{self.dtype.name}>")

    # -- input checks -------------------------------------------------------------------------
    def check_ids(self, ids, what: str = "ids") -> np.ndarray:
        """``ids`` (B, S) or (S,) token ids as an int32 (B, S) host array. Raises
        ModelInputError for an empty or ragged batch, a non-integer array, or an id outside
        [0, vocab_size)."""
        if isinstance(ids, fl.Tensor):
            ids = ids.numpy()
        try:
            a = np.asarray(ids)
        except ValueError:
            raise ModelInputError(f"{what}: sequences of different lengths; pass a "
                                  "rectangular (batch, seq) array") from None
        if a.ndim == 1:
            a = a[None, :]
        if a.ndim != 2 or a.size == 0 or a.dtype.kind not in "iu":
            raise ModelInputError(f"{what}: expected a non-empty (batch, seq) array of integer "
                                  f"token ids, got shape {a.shape} of {a.dtype}")
        bad = (a < 0) | (a >= self.config.vocab_size)
        if bad.any():
            b, s = (int(i) for i in np.argwhere(bad)[0])
            raise ModelInputError(f"{what}[{b}, {s}] = {int(a[b, s])} is outside the "
                                  f"vocabulary [0, {self.config.vocab_size})")
        if a.shape[1] > self.config.max_position_embeddings:
            raise ModelInputError(f"{what}: {a.shape[1]} tokens are longer than the context "
                                  f"(max_position_embeddings {self.config.max_position_embeddings})")
        return a.astype(np.int32)

    # -- the network ----------------------------------------------------------------------------
    def forward(self, ids, last_only: bool = False) -> fl.Tensor:
        """Logits of token ids ``ids`` (B, S) (a (S,) array is one sequence): a (B, S, vocab)
        tensor of the model dtype, or (B, vocab) with ``last_only`` (the last position).
        Positions start at 0; no cache is kept. Raises ModelInputError (ids outside the
        vocabulary, a sequence longer than the context)."""
        a = self.check_ids(ids)
        b, s = a.shape
        logits = self.prefill(fl.asarray(a.reshape(-1)), b, s, None, last_only)
        return logits if last_only else logits.reshape((b, s, self.config.vocab_size))

    def prefill(self, ids: fl.Tensor, batch: int, seq: int, cache: KVCache | None,
                last_only: bool) -> fl.Tensor:
        """Run ``ids`` (batch * seq,) int32 at positions 0..seq-1; write k, v to ``cache`` rows
        0..seq-1 when given. Returns logits (batch * seq, V) or, ``last_only``, (batch, V)."""
        positions = fl.asarray(np.tile(np.arange(seq, dtype=np.int32), batch))

        def attend(n, q, k, v):
            c = self.config
            q, k = self._rotate(n, q, k, positions)
            q4 = q.reshape((batch, seq, c.num_heads, c.head_dim))
            k4 = k.reshape((batch, seq, c.num_kv_heads, c.head_dim))
            v4 = v.reshape((batch, seq, c.num_kv_heads, c.head_dim))
            if cache is not None:
                _write(cache, n, k4, v4, 0)  # rows 0..seq-1, known here: a parallel copy
            return nn.attention(q4, k4, v4, causal=True)

        x = self.stack(ids, positions, attend)
        if last_only:
            x = kernels.take_last(x, batch, seq)
        return nn.linear(x, self.lm_head)

    def decode(self, ids: fl.Tensor, positions: fl.Tensor, lengths: fl.Tensor,
               cache: KVCache) -> fl.Tensor:
        """One token per sequence: ``ids`` (B,) int32 at ``positions`` (B,); k, v go to cache
        row ``positions[b]``; attention over the first ``lengths[b]`` rows (= positions + 1).
        All three are device data, so the step can be captured once and replayed. -> (B, V)."""
        c = self.config
        batch = ids.shape[0]

        def attend(n, q, k, v):
            # rope, then the cache write: two kernels, measured faster on the H200 than
            # nn.rope_kv_write's one (a Qwen3-1.7B step: 435.9 against 380.8 tokens/s)
            q, k = self._rotate(n, q, k, positions)
            _write(cache, n, k.reshape((batch, 1, c.num_kv_heads, c.head_dim)),
                   v.reshape((batch, 1, c.num_kv_heads, c.head_dim)), positions)
            return nn.decode_attention(q, cache.k[n], cache.v[n], lengths)

        return nn.linear(self.stack(ids, positions, attend), self.lm_head)

    def stack(self, ids: fl.Tensor, positions: fl.Tensor, attend) -> fl.Tensor:
        """Embedding, every layer and the final norm: (T,) ids -> (T, hidden) normalised
        hidden states. ``attend(layer index, q (T, Hq, D), k (T, Hkv, D), v (T, Hkv * D))``,
        q and k before RoPE (and Qwen3's q/k norm: ``_rotate``), returns the attention output,
        any shape of T * Hq * D elements (q, k, v may be strided views of the fused
        projection's output)."""
        h = nn.embedding(ids, self.embed)
        x, residual = nn.rms_norm(h, self.layers[0].input_norm, self.config.rms_norm_eps), h
        for n in range(len(self.layers)):
            x, residual = self.block(n, x, residual, positions, attend)
        return x

    def block(self, n: int, x, residual, positions: fl.Tensor, attend):
        """Layer ``n`` on its normalised input ``x`` (T, hidden) and the residual stream:
        returns the next layer's normalised input (the final norm's after the last layer) and
        the new residual."""
        c, layer = self.config, self.layers[n]
        t, eps = x.shape[0], c.rms_norm_eps
        q, k, v = _project(x, layer.qkv, layer.qkv_bias, (c.q_size, c.kv_size, c.kv_size))
        q = q.reshape((t, c.num_heads, c.head_dim))    # views: a head's D values are contiguous
        k = k.reshape((t, c.num_kv_heads, c.head_dim))
        a = attend(n, q, k, v)
        o = nn.linear(a.reshape((t, c.q_size)), layer.wo, layer.bo)
        x, residual = nn.rms_norm(o, layer.post_norm, eps, residual=residual)
        gate, up = _project(x, layer.gate_up, layer.gate_up_bias,
                            (c.intermediate_size, c.intermediate_size))
        m = nn.linear(nn.silu_mul(gate, up), layer.down, layer.bdown)
        w = self.layers[n + 1].input_norm if n + 1 < len(self.layers) else self.norm
        return nn.rms_norm(m, w, eps, residual=residual)

    def _rotate(self, n: int, q, k, positions: fl.Tensor):
        """RoPE of layer n's q (T, Hq, D) and k (T, Hkv, D) at ``positions``; for Qwen3 the
        rms_norm of each head first, in the same kernel."""
        c, layer = self.config, self.layers[n]
        if c.qk_norm:
            return nn.qk_norm_rope(q, k, layer.q_norm, layer.k_norm, c.rms_norm_eps, self.cos,
                                   self.sin, positions)
        return nn.rope(q, k, self.cos, self.sin, positions)

    def new_cache(self, batch: int, max_ctx: int) -> KVCache:
        """Zeroed per-layer caches (batch, max_ctx, kv_heads, head_dim)."""
        c = self.config
        shape = (batch, max_ctx, c.num_kv_heads, c.head_dim)
        return KVCache([fl.zeros(shape, self.dtype) for _ in self.layers],
                       [fl.zeros(shape, self.dtype) for _ in self.layers])

    def free_caches(self) -> None:
        """Drop the KV caches and captured decode steps ``generate`` keeps between calls."""
        greedy.free(self)

    def generate(self, prompt_ids, max_new_tokens: int, max_ctx: int | None = None) -> np.ndarray:
        """Greedy decoding: ``max_new_tokens`` tokens after each prompt of ``prompt_ids``
        (B, P) (equal lengths; a (P,) array is one prompt) -> an int32 (B, max_new_tokens) host
        array. See ``fearless.models.generate.generate`` for the cache, the captured decode step
        and the errors."""
        return greedy.generate(self, prompt_ids, max_new_tokens, max_ctx)


def _stacked(parts: list) -> fl.Tensor:
    """One tensor holding ``parts`` (same dtype and trailing shape) one after another along
    axis 0, copied on the device (the parts are dropped by the caller)."""
    out = fl.empty((sum(p.shape[0] for p in parts),) + tuple(parts[0].shape[1:]), parts[0].dtype)
    row = 0
    for p in parts:
        kernels.copy_into(p, out[row:row + p.shape[0]])
        row += p.shape[0]
    return out


def _project(x, weights: tuple, biases: tuple | None, sizes: tuple) -> list:
    """The outputs of a projection group: x (T, K) by each of ``weights`` (N_i, K) (a fused
    group: one matrix of sum(sizes) rows) -> one (T, size) tensor per entry of ``sizes``,
    column views of the fused output (no copies)."""
    ys = [nn.linear(x, w, b) for w, b in zip(weights, biases or (None,) * len(weights))]
    if len(ys) == len(sizes):
        return ys
    (y,) = ys
    edges = np.cumsum((0,) + tuple(sizes))
    return [y[:, int(a):int(b)] for a, b in zip(edges[:-1], edges[1:])]


def _write(cache: KVCache, n: int, k, v, start) -> None:
    """Write k, v (B, S, Hkv, D) into layer n's cache from row ``start`` (a host int, or (B,)
    device rows: nn.kv_cache_write).
    Keeps the handles it returns: the caches given are moved into the write."""
    cache.k[n], cache.v[n] = nn.kv_cache_write(cache.k[n], cache.v[n], k, v, start)
