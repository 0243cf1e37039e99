"""Autotuning shared by both kernel tracks: ``driver.py`` (a call's config: a stored ranking, a
tuning now, or the first config that accepts the arguments), ``tuner.py`` (the measurement loop
on scratch twins), ``rankings.py`` (the rankings on disk) and ``simt.py`` (``fl.autotune`` for
SIMT kernels). The tile track's ``ft.autotune`` is ``fearless/tile/tuning.py``."""
