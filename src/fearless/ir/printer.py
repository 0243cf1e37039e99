"""Deterministic text form of the IR, for ``fearless inspect --stage ir`` and golden tests."""
from __future__ import annotations

from fearless.frontend.spans import Span
from fearless.ir.core import Function, Operation, Region, Value


class _Names:
    def __init__(self):
        self.names: dict[int, str] = {}
        self.count = 0

    def define(self, v: Value, name: str | None = None) -> str:
        if name is None:
            name, self.count = f"%{self.count}", self.count + 1
        self.names[id(v)] = name
        return name

    def __getitem__(self, v: Value) -> str:
        return self.names.get(id(v), "%<undefined>")


def _is_location(value) -> bool:
    return isinstance(value, Span) or (isinstance(value, tuple) and value
                                        and all(isinstance(v, Span) for v in value))


def _attrs(op: Operation) -> str:
    # source locations are debug information, not part of the printed op
    keys = [k for k in sorted(op.attrs) if not _is_location(op.attrs[k])]
    if not keys:
        return ""
    body = ", ".join(f"{k} = {op.attrs[k]!r}" for k in keys)
    return f" {{{body}}}"


def _region(region: Region, names: _Names, indent: str, out: list[str]) -> None:
    if region.args:
        args = ", ".join(f"{names.define(a)}: {a.type}" for a in region.args)
        out.append(f"{indent}^({args}):")
    for op in region.ops:
        _op(op, names, indent, out)


def _op(op: Operation, names: _Names, indent: str, out: list[str]) -> None:
    operands = ", ".join(names[v] for v in op.operands)
    results = ", ".join(names.define(r) for r in op.results)
    lhs = f"{results} = " if results else ""
    types = " : " + ", ".join(str(r.type) for r in op.results) if op.results else ""
    line = f"{indent}{lhs}{op.name}{' ' + operands if operands else ''}{_attrs(op)}{types}"
    if not op.regions:
        out.append(line)
        return
    out.append(line + " {")
    for i, region in enumerate(op.regions):
        if i:
            out.append(f"{indent}}} {{")
        _region(region, names, indent + "  ", out)
    out.append(f"{indent}}}")


def print_function(fn: Function) -> str:
    """The text of ``fn``; value numbers depend only on program order, so output is stable."""
    names = _Names()
    params = ", ".join(f"{names.define(p.value, '%' + p.name)}: {p.type}" for p in fn.params)
    attrs = "".join(f" {k}={fn.attrs[k]!r}" for k in sorted(fn.attrs) if k != "bounds_sites")
    out = [f"kernel @{fn.name}({params}){attrs} {{"]
    _region(fn.body, names, "  ", out)
    out.append("}")
    return "\n".join(out) + "\n"
