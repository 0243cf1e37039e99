"""The CPU backend's scalar ops (arith.*, math.*): the ops' own reference semantics.

The interpreters (``simt.py``, ``tile.py``) apply each op's ``OpDef.eval`` (``ir/ops/arith.py``,
``ir/ops/math.py``: the definitions docs/semantics.md states and the GPU lowerings are held to)
to the operands' lane vectors or tiles, at the result's dtype. Nothing here restates what an op
computes.
"""
from __future__ import annotations

import numpy as np

from fearless.ir.opdef import REGISTRY, Op

# op name -> eval(dtype, attrs, *operand arrays), for every op with one but constants (which
# the interpreters splat to their own shapes)
SCALAR = {name: d.eval for name, d in REGISTRY.items()
          if d.eval is not None and name != Op.CONSTANT}


def evaluate(op, *args):
    """``op``'s result from its operands' arrays (a scalar op)."""
    return SCALAR[op.name](op.results[0].type.dtype, op.attrs, *args)


def constant(op) -> np.ndarray:
    """The 0-d array of an ``arith.constant``."""
    return REGISTRY[Op.CONSTANT].eval(op.results[0].type.dtype, op.attrs)
