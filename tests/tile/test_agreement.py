"""The tuner's comparison of its configs' outputs (``autotuning/agreement.py``): sliced,
float32 for 16- and 32-bit floats, against a float64 NumPy reference of the same rule."""
from types import SimpleNamespace

import numpy as np
import pytest

from fearless.autotuning import agreement
from fearless.errors import AutotuneError


def _reference_rule(got, want, r):
    """The rule in float64 on whole arrays."""
    g, w = got.astype(np.float64), want.astype(np.float64)
    finite = np.isfinite(w)
    mean = float(np.abs(w[finite]).mean()) if finite.any() else 0.0
    close = (np.abs(g - w) <= r * (np.abs(w) + mean)) & finite
    bad = ~(close | (np.isnan(g) & np.isnan(w)) | (g == w))
    return int(np.flatnonzero(bad.ravel())[0]) if bad.any() else None


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_the_sliced_rule_finds_the_first_element_float64_finds(dtype, monkeypatch):
    """Slices of 1000 over 5000 elements (a slice boundary at every 1000): the first bad
    index is the whole-array float64 rule's, for mismatches near the tolerance's edge."""
    monkeypatch.setattr(agreement, "SLICE", 1000)
    rng = np.random.default_rng(11)
    want = (rng.standard_normal(5000) * 3).astype(dtype)
    r = agreement.default_rtol(np.dtype(dtype))
    mean = float(np.abs(want.astype(np.float64)).mean())
    got = want.copy()
    for k, factor in ((3999, 0.5), (2001, 1.5), (4500, 4.0)):   # under and over the bound
        got[k] = want[k] + dtype(factor * r * (abs(float(want[k])) + mean))
    assert agreement.mean_magnitude(want) == pytest.approx(mean, rel=1e-6)
    expected = _reference_rule(got, want, r)
    assert expected in (2001, 4500)
    why = agreement.differs({"o": got}, {"o": want}, None)
    assert why.startswith(f"'o' element {expected}:")


def test_nan_matches_nan_and_an_infinity_only_itself():
    """Before the slicing, |x - inf| <= rtol x inf held: any value matched an infinity."""
    want = np.array([1.0, np.nan, np.inf, -np.inf, 2.0], np.float32)
    assert agreement.differs({"o": want.copy()}, {"o": want}, None) is None
    got = want.copy()
    got[2] = -np.inf
    assert agreement.differs({"o": got}, {"o": want}, None).startswith("'o' element 2:")
    got = want.copy()
    got[3] = 5.0
    assert agreement.differs({"o": got}, {"o": want}, None).startswith("'o' element 3:")
    got = want.copy()
    got[1] = 1.0
    assert agreement.differs({"o": got}, {"o": want}, None).startswith("'o' element 1:")


def test_integers_are_compared_exactly():
    want = np.arange(10, dtype=np.int32).reshape(2, 5)
    got = want.copy()
    got[1, 2] += 1
    assert agreement.differs({"i": got}, {"i": want}, None) == \
        "'i' element 7: 8 against 7 (compared exactly)"


def test_the_agreement_keeps_the_first_outputs_only_and_raises_after():
    """Config 0's outputs are the reference; config 2 differs; ``check`` names 0 and 2.
    With compare=False nothing is kept or raised."""
    tuned = SimpleNamespace(compare=True, rtol=None, configs=["c0", "c1", "c2"], name="k")
    a = agreement.Agreement(tuned)
    ref = np.random.default_rng(5).standard_normal(64).astype(np.float32)
    a.add(0, {"o": ref})
    a.add(1, {"o": ref * (1 + 1e-7)})
    a.add(2, {"o": ref * 1.5})
    assert a.first == 0 and a.reference["o"] is ref
    with pytest.raises(AutotuneError, match="configs 0 'c0' and 2 'c2' compute different values"):
        a.check()
    off = agreement.Agreement(SimpleNamespace(compare=False, rtol=None))
    off.add(0, {"o": ref})
    off.add(1, {"o": ref * 2})
    assert off.reference is None
    off.check()
