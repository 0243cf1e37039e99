"""Lookups several passes need: which parameter (or shared array) an array value is."""
from __future__ import annotations

from fearless.ir.core import Function, Param


def params_by_value(fn: Function) -> dict[int, Param]:
    return {id(p.value): p for p in fn.params}


def array_name(params: dict[int, Param], array) -> str:
    """The source name of an array value: its parameter, or the shared array's variable."""
    p = params.get(id(array))
    return p.name if p is not None else (array.hint or "shared memory")
