"""Lookups several passes need: which parameter an array value is, which op defined a value."""
from __future__ import annotations

from fearless.ir.core import Function, Param


def params_by_value(fn: Function) -> dict[int, Param]:
    return {id(p.value): p for p in fn.params}


def definitions(fn: Function) -> dict:
    """``id(value) -> op`` for every op result in ``fn``."""
    return {id(r): op for op in fn.walk() for r in op.results}
