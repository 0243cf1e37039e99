"""Lookups several passes need: which parameter an array value is."""
from __future__ import annotations

from fearless.ir.core import Function, Param


def params_by_value(fn: Function) -> dict[int, Param]:
    return {id(p.value): p for p in fn.params}
