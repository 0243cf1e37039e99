"""fearless.nn.embedding (exact row copies, zero rows for ids outside the table) and argmax
(first index of the maximum, NaN ranked below every number) against NumPy."""
from __future__ import annotations

import numpy as np
import pytest

from fearless import nn
from tests.support import BACKENDS
from fearless.errors import ArgumentTypeError
from tests.nn._ref import call, cases, f64, host, rand


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("dt,idt,h", cases([(np.int32, 700)], [(np.int64, 64),
                                                                 (np.int32, 5000)]))
def test_embedding(backend, dt, idt, h):
    v = 37
    table = rand(dt, (v, h), 1, 2.0)
    ids = np.random.default_rng(2).integers(-3, v + 3, size=11).astype(idt)
    ids[:3] = [-1, v, 0]                      # both edges outside, and row 0
    got = f64(host(call(nn.embedding, ids, table)))
    ok = (ids >= 0) & (ids < v)
    want = np.where(ok[:, None], f64(table)[np.clip(ids, 0, v - 1)], 0.0)
    np.testing.assert_array_equal(got, want)


def planted(dt, t: int, v: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Random rows with the maximum planted twice (a tie) in different chunks; returns the
    logits and the expected indices (the first of the tie)."""
    rng = np.random.default_rng(seed)
    x = f64(rand(dt, (t, v), seed))
    first = rng.integers(0, v - 1, size=t)
    second = rng.integers(first + 1, v)
    x[np.arange(t), first] = x[np.arange(t), second] = 100.0
    return np.asarray(x).astype(dt.numpy), first


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("dt,v", cases([(20000,)], [(100,), (8192,), (151936,)]))
def test_argmax_first_of_ties(backend, dt, v):
    x, first = planted(dt, 3, v, v)
    got = host(call(nn.argmax, x))
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, first)
    np.testing.assert_array_equal(got, np.argmax(f64(x), axis=1))


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_argmax_nan_rule(backend):
    """NaN ranks below every number, -inf included; an all-NaN row gives 0."""
    v = 20000
    x = np.full((4, v), np.nan, np.float32)
    x[1, 12345] = 1.0                 # a number in the second chunk, NaN around it
    x[2, 17000] = -np.inf             # -inf beats NaN: the only number, in the third chunk
    x[3] = np.random.default_rng(3).standard_normal(v)
    x[3, ::7] = np.nan
    got = host(call(nn.argmax, x))
    want3 = int(np.nanargmax(x[3]))
    np.testing.assert_array_equal(got, [0, 12345, 17000, want3])


def test_bad_input():
    with pytest.raises(ArgumentTypeError, match="kernel 'embedding', parameter 'ids'"):
        nn.embedding(np.zeros(3, np.float32), np.zeros((4, 4), np.float32))
    with pytest.raises(ArgumentTypeError, match="kernel 'embedding', parameter 'table'"):
        nn.embedding(np.zeros(3, np.int32), np.zeros(4, np.float32))
    with pytest.raises(ArgumentTypeError, match="kernel 'argmax', parameter 'x'"):
        nn.argmax(np.zeros(4, np.float32))
    with pytest.raises(ArgumentTypeError, match="kernel 'argmax', parameter 'x'"):
        nn.argmax(np.zeros((2, 4), np.int32))


@pytest.mark.gpu
def test_torch_embedding_and_argmax():
    torch = pytest.importorskip("torch")
    g = torch.Generator(device="cuda").manual_seed(0)
    table = torch.randn(1000, 2048, device="cuda", generator=g).to(torch.bfloat16)
    ids = torch.randint(0, 1000, (7,), device="cuda", generator=g, dtype=torch.int32)
    out = nn.embedding(ids, table)
    assert isinstance(out, torch.Tensor) and torch.equal(out, table[ids.long()])
    logits = torch.randn(5, 151936, device="cuda", generator=g).to(torch.bfloat16)
    got = nn.argmax(logits)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.int32
    assert torch.equal(got.long(), logits.float().argmax(-1))
