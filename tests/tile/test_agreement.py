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
    index is the whole-array float64 rule's, for mismatches on either side of the bound (1%
    of it away: the float32 rule's rounding is a few units of 2^-24 of it)."""
    monkeypatch.setattr(agreement, "SLICE", 1000)
    rng = np.random.default_rng(11)
    want = (rng.standard_normal(5000) * 3).astype(dtype)
    r = agreement.default_rtol(np.dtype(dtype))
    mean = float(np.abs(want.astype(np.float64)).mean())
    got = want.copy()
    for k, factor in ((3999, 0.99), (1500, 0.5), (2001, 1.01), (4500, 4.0)):
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


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_values_near_the_largest_float_are_still_bounded(dtype):
    """r x (|value| + mean) and a sum of such values overflow to inf near the format's largest
    value; the bound must still refuse 0 against 0.9 x the largest."""
    big = np.finfo(dtype).max * 0.9
    want = np.array([big, big], dtype)
    assert agreement.differs({"o": np.array([0, big], dtype)}, {"o": want}, None) == \
        f"'o' element 0: 0.0 against {float(want[0])!r} (compared within 1e-05 x (|value| + " \
        f"{float(want[0]):.3g}))"
    assert agreement.mean_magnitude(want) == float(want[0])   # no overflow to inf
    # within 0.4 x (|big| + big) of big: 0.2 x big and up, not 0
    assert agreement.differs({"o": np.array([0, big], dtype)}, {"o": want}, 0.4) is not None
    assert agreement.differs({"o": want * dtype(0.3)}, {"o": want}, 0.4) is None


def test_integers_are_compared_exactly():
    want = np.arange(10, dtype=np.int32).reshape(2, 5)
    got = want.copy()
    got[1, 2] += 1
    assert agreement.differs({"i": got}, {"i": want}, None) == \
        "'i' element 7: 8 against 7 (compared exactly)"


def test_the_agreement_keeps_the_first_outputs_only_and_raises_for_the_kept_configs():
    """Config 0's outputs are the reference; config 2 differs: ``check`` names 0 and 2 when
    the timing kept both, nothing when it dropped 2; with 0 dropped, 1 (which agreed with 0)
    and 2 are named. With compare=False nothing is kept or raised."""
    tuned = SimpleNamespace(compare=True, rtol=None, configs=["c0", "c1", "c2"], name="k")
    a = agreement.Agreement(tuned)
    ref = np.random.default_rng(5).standard_normal(64).astype(np.float32)
    a.add(0, {"o": ref})
    assert a.means is None   # the reference's mean waits for a second config
    a.add(1, {"o": ref * (1 + 1e-7)})
    a.add(2, {"o": ref * 1.5})
    assert a.first == 0 and a.reference["o"] is ref
    with pytest.raises(AutotuneError, match="configs 0 'c0' and 2 'c2' compute different values"):
        a.check({0, 1, 2})
    a.check({0, 1})
    with pytest.raises(AutotuneError, match=r"configs 1 'c1' and 2 'c2' compute different "
                                            r"values: .* config 1 agreed with them"):
        a.check({1, 2})
    a.check({2})
    off = agreement.Agreement(SimpleNamespace(compare=False, rtol=None))
    off.add(0, {"o": ref})
    off.add(1, {"o": ref * 2})
    assert off.reference is None
    off.check({0, 1})
