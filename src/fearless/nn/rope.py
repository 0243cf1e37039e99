"""Rotary position embeddings: the cos/sin tables Hugging Face computes (default and llama3
scaling) and one tile kernel that rotates q and k of each token at the positions held in
device memory (so a captured decode step serves every position)."""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TypeVar

import numpy as np

import fearless as fl
from fearless import dtypes, f32
from fearless import tile as ft
from fearless.errors import ContractError
from fearless.nn import _common as c
from fearless.runtime.tensor import asarray
from fearless.tracebacks import user_facing

T = TypeVar("T")
P = TypeVar("P")


@fl.func
def _rotated(x, out, cos, sin, pos, interleaved):
    """HF's ``x * cos + rotate(x) * sin`` for the (1, heads, D) tile of token ``out.tile_index[0]``,
    each product and the sum rounded to the dtype, cos and sin rounded to it first."""
    t = out.tile_index[0]
    _, hp, dp = out.tile_shape
    d = x.shape[2]
    h = out.tile_index[1] * hp + ft.arange(hp).reshape((1, hp, 1))   # this block's heads
    col = ft.arange(dp).reshape((1, 1, dp))
    if interleaved:     # GPT-J: pairs (2i, 2i + 1) rotate by frequency i
        freq, partner, first = col // 2, col ^ 1, (col & 1) == 0
    else:               # neox: halves (i, i + D/2) rotate by frequency i (rotate_half)
        freq, partner, first = col % (d // 2), (col + d // 2) % d, col < d // 2
    cs = ft.gather(cos, (pos, freq), padding=math.nan).astype(out.dtype)
    sn = ft.gather(sin, (pos, freq), padding=math.nan).astype(out.dtype)
    a = ft.load_like(x, out) * cs
    b = ft.gather(x, (t, h, partner)) * sn
    return ft.where(first, a - b, a + b)


@ft.kernel
def rope_tokens(qo: ft.Out[T], ko: ft.Out[T], q: ft.In[T], k: ft.In[T], cos: ft.In[dtypes.f32],
                sin: ft.In[dtypes.f32], positions: ft.In[P], interleaved: ft.Const[int] = 0):
    pos = ft.gather(positions, qo.tile_index[0])
    qo.store(_rotated(q, qo, cos, sin, pos, interleaved))
    ko.store(_rotated(k, ko, cos, sin, pos, interleaved))


def _checked(fn: str, qt, kt, cos, sin, positions):
    """The checks of rope's arguments (shared with qk_norm_rope): (cos, sin, positions) as
    Tensors."""
    ct, st, pt = c.tensor(fn, "cos", cos), c.tensor(fn, "sin", sin), \
        c.tensor(fn, "positions", positions)
    c.check_rank(fn, "q", qt, 3, "(T, Hq, D)")
    c.check_rank(fn, "k", kt, 3, "(T, Hkv, D)")
    c.check_dtype(fn, "q", qt, c.FLOATS)
    c.check_same_dtype(fn, "k", kt, "q", qt)
    t, _, d = qt.shape
    if d % 2:
        raise ContractError(f"the head dimension {d} is odd: rotary pairs need an even one",
                            kernel=fn, param="q")
    c.check_shape(fn, "k", kt, (t, None, d), "q's (T, ?, D)")
    for name, tab in (("cos", ct), ("sin", st)):
        c.check_rank(fn, name, tab, 2, "(max_positions, D // 2)")
        c.check_dtype(fn, name, tab, (dtypes.f32,))
        c.check_shape(fn, name, tab, (None, d // 2), "q's head dimension halved")
    c.check_shape(fn, "sin", st, ct.shape, "cos's shape")
    c.check_rank(fn, "positions", pt, 1, "(T,)")
    c.check_dtype(fn, "positions", pt, c.INDEX)
    c.check_shape(fn, "positions", pt, (t,), "q's T")
    return ct, st, pt


def token_tiles(q_shape: tuple, k_shape: tuple, sms: int | None = None) -> tuple:
    """The (1, heads, D) tiles of q (T, Hq, D) and k (T, Hkv, D) for rope and qk_norm_rope:
    all of a token's heads in one tile block, or, when the tokens are too few to fill the SMs
    (a decode step), its heads in 4 or 2 groups, q's and k's alike, so that both partitions
    have the same grid. On the H200 one block per token took 6 us for Qwen3-1.7B's decode
    step (16 + 8 heads: a chain of dependent gathers that one block runs alone).
    ``sms`` defaults to ``_common.planning_sms()``."""
    t, hq, d = q_shape
    hkv = k_shape[1]
    sms = c.planning_sms() if sms is None else sms
    qp, kp, dp = c.pow2(hq), c.pow2(hkv), c.pow2(d)
    groups = 1
    if 4 * t <= sms:
        groups = next((g for g in (4, 2) if g <= kp and -(-hq // (qp // g)) == g and
                       -(-hkv // (kp // g)) == g), 1)
    return (1, qp // groups, dp), (1, kp // groups, dp)


@user_facing
def rope(q, k, cos, sin, positions, interleaved: bool = False):
    """q and k rotated by the angles of each token's position (HF's ``apply_rotary_pos_emb``).

    ``q``: (T, Hq, D), ``k``: (T, Hkv, D), one dtype (f16, bf16, f32), D even; strided views
    of the projection outputs are fine. ``cos``, ``sin``: (max_positions, D // 2) f32 tables
    (``rope_tables``). ``positions``: (T,) int32 or int64, device data: token t is rotated by
    row ``positions[t]`` of the tables; a position outside the tables gives NaN rows.
    ``interleaved``: GPT-J's pairs ``(2i, 2i + 1)`` instead of the neox halves ``(i, i + D/2)``.

    Steps (HF's order): ``c = cos[pos, i]`` and ``s = sin[pos, i]`` rounded to the dtype
    (HF's ``cos.to(x.dtype)``), then ``x * c`` rounded, ``rotate(x) * s`` rounded (rotate_half:
    ``-x2`` then ``x1``), their sum rounded. One tile kernel, one tile block per token for
    all heads of q and k (per group of heads when the tokens are few: ``token_tiles``).

    Returns new contiguous ``(q_out, k_out)`` (torch tensors for a torch ``q``). Raises
    ArgumentTypeError for wrong ranks or dtypes, ContractError for mismatched T, D or tables.
    """
    fn = "rope"
    qt, kt = c.tensor(fn, "q", q), c.tensor(fn, "k", k)
    ct, st, pt = _checked(fn, qt, kt, cos, sin, positions)
    qout, kout = c.output(q, qt.shape, qt.dtype), c.output(q, kt.shape, qt.dtype)
    qtile, ktile = token_tiles(qt.shape, kt.shape)
    qp, kp = qout.partition(qtile), kout.partition(ktile)
    qp, kp, *_ = c.run(rope_tokens(qp, kp, qt, kt, ct, st, pt, interleaved=int(interleaved)))
    return qout.result(qp), kout.result(kp)


@fl.func
def _normed_rotated(x, w, eps, out, cos, sin, pos, interleaved):
    """``_rotated`` of the per-head RMSNorm of x (rms_norm's steps, each rounding the same):
    the partner element is normed with its own head's scale, so no second pass is needed."""
    t = out.tile_index[0]
    _, hp, dp = out.tile_shape
    d = x.shape[2]
    h = out.tile_index[1] * hp + ft.arange(hp).reshape((1, hp, 1))   # this block's heads
    col = ft.arange(dp).reshape((1, 1, dp))
    if interleaved:
        freq, partner, first = col // 2, col ^ 1, (col & 1) == 0
    else:
        freq, partner, first = col % (d // 2), (col + d // 2) % d, col < d // 2
    x32 = ft.load_like(x, out).astype(f32)
    scale = ft.rsqrt(ft.sum(x32 * x32, 2, keepdims=True) / d + eps)
    wt = ft.load(w, (0,), (dp,)).reshape((1, 1, dp))
    normed = (x32 * scale).astype(out.dtype) * wt
    mate = (ft.gather(x, (t, h, partner)).astype(f32) * scale).astype(out.dtype) * \
        ft.gather(w, partner)
    cs = ft.gather(cos, (pos, freq), padding=math.nan).astype(out.dtype)
    sn = ft.gather(sin, (pos, freq), padding=math.nan).astype(out.dtype)
    a = normed * cs
    b = mate * sn
    return ft.where(first, a - b, a + b)


@ft.kernel
def norm_rope_tokens(qo: ft.Out[T], ko: ft.Out[T], q: ft.In[T], k: ft.In[T], qw: ft.In[T],
                     kw: ft.In[T], eps: f32, cos: ft.In[dtypes.f32], sin: ft.In[dtypes.f32],
                     positions: ft.In[P], interleaved: ft.Const[int] = 0):
    pos = ft.gather(positions, qo.tile_index[0])
    qo.store(_normed_rotated(q, qw, eps, qo, cos, sin, pos, interleaved))
    ko.store(_normed_rotated(k, kw, eps, ko, cos, sin, pos, interleaved))


def _checked_weights(fn: str, qt, q_weight, k_weight):
    """The q/k norm weights as Tensors, checked: (D,) of q's dtype (shared with
    rope_kv_write)."""
    qwt, kwt = c.tensor(fn, "q_weight", q_weight), c.tensor(fn, "k_weight", k_weight)
    for name, w in (("q_weight", qwt), ("k_weight", kwt)):
        c.check_same_dtype(fn, name, w, "q", qt)
        c.check_shape(fn, name, w, (qt.shape[2],), "q's head dimension")
    return qwt, kwt


@user_facing
def qk_norm_rope(q, k, q_weight, k_weight, eps: float, cos, sin, positions,
                 interleaved: bool = False):
    """Qwen3's per-head q/k RMSNorm followed by ``rope``, in one kernel: the same values as
    ``rope(rms_norm(q, q_weight, eps), rms_norm(k, k_weight, eps), cos, sin, positions)``,
    every rounding step the same (see ``rms_norm`` and ``rope``; only the order of the norm's
    sum is unspecified, as there).

    ``q`` (T, Hq, D), ``k`` (T, Hkv, D) as for ``rope`` (strided views fine); ``q_weight``,
    ``k_weight``: (D,) of their dtype; ``eps`` the norm's epsilon; ``cos``, ``sin``,
    ``positions``, ``interleaved`` as for ``rope``. Returns new contiguous ``(q_out, k_out)``.
    Raises as ``rope`` does, and ArgumentTypeError / ContractError for a weight of another
    dtype or length.
    """
    fn = "qk_norm_rope"
    qt, kt = c.tensor(fn, "q", q), c.tensor(fn, "k", k)
    ct, st, pt = _checked(fn, qt, kt, cos, sin, positions)
    qwt, kwt = _checked_weights(fn, qt, q_weight, k_weight)
    qout, kout = c.output(q, qt.shape, qt.dtype), c.output(q, kt.shape, qt.dtype)
    qtile, ktile = token_tiles(qt.shape, kt.shape)
    qp, kp = qout.tensor.partition(qtile), kout.tensor.partition(ktile)
    qp, kp, *_ = c.run(norm_rope_tokens(qp, kp, qt, kt, qwt, kwt, eps, ct, st, pt,
                                        interleaved=int(interleaved)))
    return qout.result(qp), kout.result(kp)


# -- tables ----------------------------------------------------------------------------------
def inv_freq(head_dim: int, theta: float, scaling: Mapping | None = None) -> np.ndarray:
    """(head_dim // 2,) f32 inverse frequencies as HF computes them, every step in f32 with
    Python numbers converted to f32 first (torch's rule for a tensor and a Python scalar, which
    NumPy 2 follows): ``_compute_default_rope_parameters``'s ``1 / theta ** (arange(0, D, 2) /
    D)``, then ``_compute_llama3_parameters``'s band-wise scaling when ``scaling`` asks for it.
    Raises ValueError for another rope type or a missing key."""
    f32 = np.float32
    exponent = np.arange(0, head_dim, 2, dtype=np.int64).astype(f32) / f32(head_dim)
    # torch's f32 pow: correctly rounded (glibc powf); f64 pow rounded once gives the same
    inv = f32(1.0) / (f32(theta).astype(np.float64) ** exponent.astype(np.float64)).astype(f32)
    kind = _rope_type(scaling)
    if kind == "default":
        return inv
    try:
        factor = scaling["factor"]
        low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
        old = scaling["original_max_position_embeddings"]
    except KeyError as exc:
        raise ValueError(f"rope scaling of type 'llama3' needs the key {exc.args[0]!r}") from None
    low_wavelen, high_wavelen = old / low, old / high           # Python floats, as in HF
    wavelen = 2 * math.pi / inv
    scaled = np.where(wavelen > low_wavelen, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, scaled).astype(f32)


def _rope_type(scaling: Mapping | None) -> str:
    if scaling is None:
        return "default"
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind not in ("default", "llama3"):
        raise ValueError(f"rope type {kind!r} is not supported (only 'default' and 'llama3')")
    return kind


@user_facing
def rope_tables(head_dim: int, max_positions: int, theta: float, scaling: Mapping | None = None):
    """The (max_positions, head_dim // 2) f32 ``(cos, sin)`` tables of ``rope``, as HF's
    rotary embedding computes them: ``inv_freq`` (see ``inv_freq``: ``rope_theta`` ``theta``,
    ``rope_scaling`` ``scaling``: None, ``{"rope_type": "default"}`` or llama3's ``{"rope_type":
    "llama3", "factor", "low_freq_factor", "high_freq_factor",
    "original_max_position_embeddings"}``), the angle ``f32(position) * inv_freq`` rounded to
    f32 (HF's f32 matmul of one term), its cos and sin rounded once to f32 (HF's attention
    scaling is 1 for these types). Fearless Tensors on the current backend.

    Raises ValueError for another rope type (yarn, dynamic, longrope, linear, ...), a missing
    llama3 key, an odd ``head_dim`` or ``max_positions`` below 1.
    """
    if head_dim < 2 or head_dim % 2 or max_positions < 1:
        raise ValueError(f"rope_tables needs an even head_dim >= 2 and max_positions >= 1, got "
                         f"{head_dim} and {max_positions}")
    angles = np.arange(max_positions, dtype=np.float32)[:, None] * inv_freq(head_dim, theta,
                                                                             scaling)[None, :]
    a64 = angles.astype(np.float64)
    return asarray(np.cos(a64).astype(np.float32)), asarray(np.sin(a64).astype(np.float32))
