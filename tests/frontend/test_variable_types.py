"""Variable types: the typing stage (frontend/typing.py) walks a kernel in rounds until every
variable's type (the join of what is assigned to it) stops changing, then emission walks it once.
These tests hold it to a few rounds however many device functions are inlined, and to an error in
the user's words when types never settle."""
from __future__ import annotations

import numpy as np
import pytest

import fearless as fl
from fearless.frontend import astgen, typing
from tests.support import BACKENDS, import_source

CALLS = 80  # call sites of one helper: each inlined copy has its own return slot


def _source(calls: int) -> str:
    body = "\n".join(f"        acc = acc + half_or_zero(x[i] + {k}.0)" for k in range(calls))
    return f'''
import fearless as fl


@fl.func
def half_or_zero(v):
    if v > 2.0:
        return 0          # the return slot's first guess is an integer...
    return v * 0.5        # ...which this f32 widens


@fl.kernel
def many_calls(x: fl.Slice[fl.f32], out: fl.DisjointSlice[fl.f32]):
    i = fl.thread.index_1d()
    if i < len(out):
        acc = 0.0
{body}
        out[i] = acc
'''


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_types_settle_in_a_few_rounds_however_many_calls_are_inlined(backend, tmp_path,
                                                                      monkeypatch):
    """Each round used to stop at the first call whose return slot was guessed too narrow, so
    the rounds grew with the call sites (fuzz seed 4961: 41 calls, 32 rounds; 64 calls were
    refused)."""
    path = tmp_path / "many_calls.py"
    path.write_text(_source(CALLS))
    kernel = import_source(path, "many_calls").many_calls
    walks, walk = [], astgen.walk
    for module in (astgen, typing):
        monkeypatch.setattr(module, "walk",
                            lambda ctx, *a: walks.append(ctx.typing) or walk(ctx, *a))
    xh = np.random.default_rng(3).standard_normal(64).astype(np.float32)
    out = fl.full(64, np.nan, fl.f32)
    kernel[kernel.prepare(64)](fl.asarray(xh), out)
    # CALLS terms v = x + k (rounded to f32), each 0 when v > 2 and v * 0.5 (exact) otherwise,
    # added in order in f64: acc starts as the literal 0.0, whose default type f64 is the
    # fixpoint's first guess, and f64 + f32 stays f64; rounded once to f32 by the store
    want = np.zeros(64, np.float64)
    for k in range(CALLS):
        v = xh + np.float32(k)
        want = want + np.where(v > 2.0, 0.0, (v * np.float32(0.5)).astype(np.float64))
    np.testing.assert_array_equal(out.numpy(), want.astype(np.float32))
    # one typing round: each return slot's first assignment is an int, but the value a call
    # gives is read as the join of the returns (f32), the type the next round would give it;
    # then one emission
    assert walks == [True, False]


def test_names_in_the_did_not_settle_message_are_the_users():
    keys = ["acc", "half#3.<return>", "half#7.<return>", "half#3.v", "<bool@12:8>"]
    assert typing._describe_keys(keys) == "'acc', 'v', the return value of 'half'"
    assert typing._describe_keys(["<bool@1:2>"]) == "the kernel's variables"
