"""IR data structures: Value, Operation, Region, Function, and the Builder that creates them."""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from fearless.frontend.spans import Span
from fearless.ir.types import Type


class Value:
    """An SSA value: the result of an Operation or an argument of a Region."""

    __slots__ = ("type", "hint")

    def __init__(self, type: Type, hint: str = ""):
        self.type = type
        self.hint = hint

    def __repr__(self) -> str:
        return f"<Value {self.hint or id(self)}: {self.type}>"


class Region:
    """A straight-line list of operations with optional arguments (a loop's induction variable)."""

    __slots__ = ("args", "ops")

    def __init__(self, args: list[Value] | None = None):
        self.args: list[Value] = args or []
        self.ops: list[Operation] = []


class Operation:
    """One op: ``name`` (a key of opdef.REGISTRY), operands, results, attributes, nested regions."""

    __slots__ = ("name", "operands", "results", "attrs", "regions", "span")

    def __init__(self, name: str, operands: list[Value], result_types: list[Type],
                 attrs: dict[str, Any] | None = None, regions: list[Region] | None = None,
                 span: Span | None = None):
        self.name = name
        self.operands = list(operands)
        self.results = [Value(t) for t in result_types]
        self.attrs = dict(attrs or {})
        self.regions = list(regions or [])
        self.span = span

    @property
    def result(self) -> Value:
        (only,) = self.results
        return only

    def walk(self):
        """This op and every op nested in its regions, in program order."""
        yield self
        for region in self.regions:
            for op in region.ops:
                yield from op.walk()

    def __repr__(self) -> str:
        return f"<Operation {self.name}>"


@dataclass
class Param:
    """A kernel parameter: its source name, IR type and the Value the body uses."""

    name: str
    type: Type
    value: Value
    span: Span | None = None


@dataclass
class Function:
    """A kernel after inlining: parameters and one body region.

    ``attrs`` carries facts that passes establish for later stages, for example ``index_space``
    (0 = none, 1 or 2) and ``bounds_sites`` (the table the runtime uses to name a failed read).
    """

    name: str
    params: list[Param]
    body: Region
    attrs: dict[str, Any] = field(default_factory=dict)

    def walk(self):
        for op in self.body.ops:
            yield from op.walk()


class Builder:
    """Appends operations to the current region; ``at(region)`` moves the insertion point."""

    def __init__(self, region: Region):
        self.region = region
        self.span: Span | None = None  # default span for ops created without one

    @contextmanager
    def at(self, region: Region):
        saved, self.region = self.region, region
        try:
            yield region
        finally:
            self.region = saved

    def create(self, name: Op | str, operands: list[Value], result_types: list[Type] | None = None,
               attrs: dict[str, Any] | None = None, regions: list[Region] | None = None,
               span: Span | None = None) -> Operation:
        """Append op ``name`` (an ``Op``; its string is accepted); ``result_types`` only for ops
        whose OpDef has no result rule."""
        from fearless.ir.opdef import REGISTRY, Op  # the registry imports ops, which import core
        try:
            name = Op(name)
        except ValueError:
            raise KeyError(f"unknown op {name!r}") from None
        if result_types is None:
            rule = REGISTRY[name].result
            if rule is None:
                raise TypeError(f"op {name!r} has no result rule: give its result types")
            result_types = rule([v.type for v in operands], attrs or {})
        op = Operation(name, operands, result_types, attrs, regions, span or self.span)
        self.region.ops.append(op)
        return op
