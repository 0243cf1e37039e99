"""``print(...)`` inside kernels -> one ``simt.print`` op per call.

Arguments are numbers (any scalar dtype) and string literals; ``sep=`` and ``end=`` take string
literals, as in Python. The call becomes a list of parts, literal text and operand positions
(``("i = ", 0, "\\n")``), which the cpu backend formats like Python's ``print`` of the values in
their dtype and the LLVM backend turns into a ``vprintf`` format string.
"""
from __future__ import annotations

import ast

from fearless.frontend.emit import describe
from fearless.frontend.infer import Const, Static
from fearless.ir import types as T
from fearless.ir.opdef import Op


def _literal(gen, node, what):
    if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
        raise gen.error(node, f"{what} must be a string literal inside kernels")
    return node.value


def handle(gen, node, obj):
    sep, end = " ", "\n"
    for kw in node.keywords:
        if kw.arg == "sep":
            sep = _literal(gen, kw.value, "sep=")
        elif kw.arg == "end":
            end = _literal(gen, kw.value, "end=")
        else:
            raise gen.error(kw.value if kw.arg else node,
                            f"print() in a kernel takes sep= and end=, not {kw.arg}=")
    parts: list = []
    values = []
    for k, arg in enumerate(node.args):
        if k:
            parts.append(sep)
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            parts.append(arg.value)
            continue
        fv = gen.visit(arg)
        if isinstance(fv, Const) and fv.weak:
            parts.append(str(fv.value))  # a Python literal prints as Python prints it
            continue
        if not isinstance(fv, Const) and not isinstance(getattr(fv, "type", None),
                                                        (T.Scalar, T.ThreadIndex)):
            raise gen.error(arg, f"print() in a kernel prints numbers and string literals, "
                                 f"not {describe(fv)}")
        parts.append(len(values))
        values.append(gen.emit.scalar(fv))
    parts.append(end)
    merged: list = []
    for p in parts:  # adjacent literal text becomes one part
        if isinstance(p, str) and merged and isinstance(merged[-1], str):
            merged[-1] += p
        elif p != "":
            merged.append(p)
    gen.b.create(Op.SIMT_PRINT, values, attrs={"parts": tuple(merged)})
    return Static(None)
