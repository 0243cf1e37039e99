"""The fused projections (q | k | v and gate | up as one matrix each) against the unfused model
and the stored tensors, with biases too, and the kernel launches they save per decode step.

Fused and unfused compute every output element as the same dot product of the same weight row
with the same x (the tiny models' K fits one K step, so no split differs), rounded once. In
bf16 the logits must be bit-equal, not merely within the reference bound. In f32 the cpu
backend's products go through NumPy's BLAS, whose order of summation follows the matrix's
shape (OpenBLAS picks its kernel by shape and CPU: seen on one CI machine, not another), so
there both are held to the reference bound only. The reference bound is checked too
(tests/models/test_model.py's derivation), since no test with biases exists elsewhere.
"""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("safetensors")

import fearless as fl  # noqa: E402
from fearless.models import launches, load  # noqa: E402
from tests.models.checkpoint import tiny_checkpoint  # noqa: E402
from tests.models.test_model import SHAPE, bound  # noqa: E402

GROUPS = {"qkv": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
          "gate_up": ("mlp.gate_proj", "mlp.up_proj")}


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def biased(request, tmp_path_factory):
    """A tiny checkpoint with attention biases, and MLP biases for Llama (Qwen3's MLP has
    none: transformers ignores the key there, as fearless does)."""
    llama = request.param == "llama"
    return tiny_checkpoint(tmp_path_factory.mktemp(request.param), request.param, seed=21,
                           attention_bias=True, mlp_bias=llama)


def test_fused_weights_are_the_stored_rows(biased):
    path, config, weights = biased
    fused, apart = load(path), load(path, fuse=False)
    for n in range(config["num_hidden_layers"]):
        p = f"model.layers.{n}."
        for group, names in GROUPS.items():
            layer, other = fused.layers[n], apart.layers[n]
            kinds = (("weight", group), ("bias", group + "_bias"))
            for kind, attr in kinds if f"{p}{names[0]}.bias" in weights else kinds[:1]:
                stored = [weights[f"{p}{name}.{kind}"] for name in names]
                (got,) = getattr(layer, attr)
                np.testing.assert_array_equal(got.numpy(), np.concatenate(stored),
                                              err_msg=f"{p}{group} {kind}")
                for t, want in zip(getattr(other, attr), stored, strict=True):
                    np.testing.assert_array_equal(t.numpy(), want)
    # the fused model keeps no separate copy: one tensor per group
    assert all(len(layer.qkv) == 1 and len(layer.gate_up) == 1 for layer in fused.layers)
    assert sum(t.nbytes for layer in fused.layers for t in layer.tensors()) == \
        sum(t.nbytes for layer in apart.layers for t in layer.tensors())


@pytest.mark.parametrize("dtype", [fl.bf16, fl.f32], ids=["bf16", "f32"])
def test_fused_logits_equal_unfused(biased, dtype):
    path, config, weights = biased
    fused, apart = load(path, dtype=dtype), load(path, dtype=dtype, fuse=False)
    ids = np.random.default_rng(9).integers(0, config["vocab_size"], SHAPE)
    got, other = fused.forward(ids).numpy(), apart.forward(ids).numpy()
    if dtype is fl.bf16:
        np.testing.assert_array_equal(got, other)
    exact, tol = bound(config, weights, ids, dtype)
    for logits in (got, other):
        err = np.abs(logits.astype(np.float64) - exact).max()
        assert err <= tol, f"max abs error {err:.3g} > bound {tol:.3g}"
    # the decode path (KV cache from strided k, v views; captured step replayed)
    tokens = fused.generate(ids, 5)
    assert fused.timing["graph"]
    np.testing.assert_array_equal(tokens, apart.generate(ids, 5))


def test_fusing_saves_three_launches_per_layer(biased):
    """Per layer, fused: one linear for q | k | v and one for gate | up instead of five (the
    tiny shapes run each linear as one kernel: no K split)."""
    path, config, _ = biased
    fused, apart = load(path), load(path, fuse=False)
    a, b = launches.decode_step(fused), launches.decode_step(apart)
    layers = config["num_hidden_layers"]
    assert a["kernels"]["_linear_tiles"] == 4 * layers + 1      # qkv, o, gate_up, down; lm_head
    assert b["kernels"]["_linear_tiles"] == 7 * layers + 1
    assert a["per_layer"] == b["per_layer"] - 3
    assert a["outside"] == b["outside"]
    assert a["step"] == a["outside"] + layers * a["per_layer"] == b["step"] - 3 * layers
    assert a["kernels"]["record"] == a["kernels"]["advance"] == 1


@pytest.mark.gpu
def test_fused_logits_match_unfused_gpu(biased):
    """On the GPU the tensor cores' order within a tile is the hardware's: each model within
    the reference bound, so the two within twice that."""
    path, config, weights = biased
    fused, apart = load(path), load(path, fuse=False)
    ids = np.random.default_rng(9).integers(0, config["vocab_size"], SHAPE)
    exact, tol = bound(config, weights, ids, fl.bf16)
    got, other = fused.forward(ids).numpy().astype(np.float64), apart.forward(ids).numpy()
    assert np.abs(got - exact).max() <= tol
    assert np.abs(got - other).max() <= 2 * tol
    assert fused.generate(ids, 5).shape == (2, 5) and fused.timing["graph"]
    assert launches.decode_step(fused)["per_layer"] == \
        launches.decode_step(apart)["per_layer"] - 3
