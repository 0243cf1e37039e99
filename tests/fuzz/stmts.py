"""The statements of the fuzzer's SIMT program tree, and ``@fl.func`` helpers.

Like the expressions in ``tree``, each statement renders itself as kernel source and runs itself
as the reference semantics of one thread (``run``); ``walk`` visits a whole tree.
"""
from __future__ import annotations

from fearless import dtypes
from fearless.dtypes import DType
from tests.fuzz import rules, scalar
from tests.fuzz.scalar import Thread, Val
from tests.fuzz.tree import SYMBOL, Expr, Frame, Read, _index, fl_name


class BreakSignal(Exception):
    pass


class ContinueSignal(Exception):
    pass


class ReturnSignal(Exception):
    def __init__(self, val: Val | None = None, t=None):
        self.val, self.t = val, t


class Stmt:
    def exprs(self) -> list:
        return []

    def known(self) -> set:
        return set()

    def blocks(self) -> list:
        return []

    def conversions(self) -> list:
        return []

    def render(self, pad: str) -> list[str]:
        raise NotImplementedError

    def ev(self, th: Thread, fr: Frame) -> None:
        raise NotImplementedError


class Assign(Stmt):
    """``name = e`` / ``name: fl.T = e`` / ``name op= e`` into a variable of type ``var_t``."""

    def __init__(self, name: str, e: Expr, var_t: DType, annotate: bool = False,
                 aug: str | None = None):
        self.name, self.e, self.var_t, self.annotate, self.aug = name, e, var_t, annotate, aug

    def exprs(self):
        return [self.e]

    def conversions(self):  # a name bound once to a constant is that constant: no slot
        return [] if self.e.const and not self.annotate and self.var_t is rules.strong(
            self.e.t) and not self.aug else [(self.e, self.var_t)]

    def render(self, pad):
        if self.aug:
            return [f"{pad}{self.name} {SYMBOL[self.aug]}= {self.e.args[1].render()}"]
        ann = f": {fl_name(self.var_t)}" if self.annotate else ""
        return [f"{pad}{self.name}{ann} = {self.e.render()}"]

    def ev(self, th, fr):
        fr.vars[self.name] = scalar.convert(th, self.e.ev(th, fr), self.e.t, self.var_t)


class Store(Stmt):
    """``out[idx] = e`` (implicit conversion to the element type)."""

    def __init__(self, array: str, dtype: DType, index: list[Expr], e: Expr,
                 aug: str | None = None):
        self.array, self.dtype, self.index, self.e, self.aug = array, dtype, index, e, aug

    def exprs(self):
        return [self.e, *self.index]

    def conversions(self):
        return [(self.e, self.dtype)]

    def render(self, pad):
        idx = ", ".join(e.render() for e in self.index)
        if self.aug:
            return [f"{pad}{self.array}[{idx}] {SYMBOL[self.aug]}= {self.e.args[1].render()}"]
        return [f"{pad}{self.array}[{idx}] = {self.e.render()}"]

    def ev(self, th, fr):
        v = scalar.convert(th, self.e.ev(th, fr), self.e.t, self.dtype)
        data = fr.arrays[self.array]
        ks = [_index(th, e, fr) for e in self.index]
        for k in ks[:-1]:
            data = data[k]
        data[ks[-1]] = v


class If(Stmt):
    def __init__(self, cond: Expr, body: list, orelse: list):
        self.cond, self.body, self.orelse = cond, body, orelse

    def exprs(self):
        return [self.cond]

    def blocks(self):
        return [self.body, self.orelse]

    def render(self, pad, word="if"):
        lines = [f"{pad}{word} {self.cond.render()}:"] + _block(self.body, pad)
        if len(self.orelse) == 1 and isinstance(self.orelse[0], If):
            lines += self.orelse[0].render(pad, "elif")
        elif self.orelse:
            lines += [f"{pad}else:"] + _block(self.orelse, pad)
        return lines

    def ev(self, th, fr):
        run(th, fr, self.body if scalar.truth(th, self.cond.ev(th, fr), self.cond.t)
            else self.orelse)


class For(Stmt):
    def __init__(self, var: str, bounds: list[Expr], body: list):
        self.var, self.bounds, self.body = var, bounds, body

    def exprs(self):
        return list(self.bounds)

    def blocks(self):
        return [self.body]

    def conversions(self):
        return [(e, dtypes.i64) for e in self.bounds]

    def render(self, pad):
        args = ", ".join(e.render() for e in self.bounds)
        return [f"{pad}for {self.var} in range({args}):"] + _block(self.body, pad)

    def ev(self, th, fr):
        b = [_index(th, e, fr) for e in self.bounds]
        start, stop, step = (0, b[0], 1) if len(b) == 1 else (b[0], b[1], 1) if len(b) == 2 \
            else b
        for k in range(start, stop, step):
            fr.vars[self.var] = Val(k)
            try:
                run(th, fr, self.body)
            except ContinueSignal:
                continue
            except BreakSignal:
                break


class While(Stmt):
    LIMIT = 64

    def __init__(self, cond: Expr, body: list):
        self.cond, self.body = cond, body

    def exprs(self):
        return [self.cond]

    def blocks(self):
        return [self.body]

    def render(self, pad):
        return [f"{pad}while {self.cond.render()}:"] + _block(self.body, pad)

    def ev(self, th, fr):
        for _ in range(self.LIMIT):
            if not scalar.truth(th, self.cond.ev(th, fr), self.cond.t):
                return
            try:
                run(th, fr, self.body)
            except ContinueSignal:
                continue
            except BreakSignal:
                return
        raise AssertionError("generator bug: a while loop ran too long")


class Jump(Stmt):
    """``break``, ``continue`` or ``return [e]`` (``ret_t``: the function's return slot type)."""

    def __init__(self, kind: str, e: Expr | None = None):
        self.kind, self.e = kind, e

    def exprs(self):
        return [self.e] if self.e is not None else []

    def render(self, pad):
        if self.kind == "return" and self.e is not None:
            return [f"{pad}return {self.e.render()}"]
        return [f"{pad}{self.kind}"]

    def ev(self, th, fr):
        if self.kind == "break":
            raise BreakSignal
        if self.kind == "continue":
            raise ContinueSignal
        raise ReturnSignal(self.e.ev(th, fr) if self.e is not None else None,
                           self.e.t if self.e is not None else None)


def _block(stmts, pad):
    lines = []
    for s in stmts:
        lines += s.render(pad + "    ")
    return lines or [pad + "    pass"]


def run(th: Thread, fr: Frame, stmts) -> None:
    for s in stmts:
        s.ev(th, fr)


class Func:
    """A generated ``@fl.func`` helper over scalar parameters of fixed types."""

    def __init__(self, name: str, params: list[tuple[str, DType]]):
        self.name, self.params = name, params
        self.body: list = []
        self.ret_t = None
        self.simple = False  # one trailing `return e`: the value flows through unconverted

    def finish(self, body: list, return_types: list, simple: bool):
        self.body, self.simple = body, simple
        self.ret_t = return_types[0] if simple else rules.join(return_types)

    def render(self) -> list[str]:
        args = ", ".join(p for p, _ in self.params)
        return ["@fl.func", f"def {self.name}({args}):"] + _block(self.body, "")

    def call(self, th: Thread, args: list[Val], arrays) -> Val:
        fr = Frame(arrays)
        fr.vars.update({p: v for (p, _), v in zip(self.params, args)})
        try:
            run(th, fr, self.body)
        except ReturnSignal as ret:
            return ret.val if self.simple else scalar.convert(th, ret.val, ret.t, self.ret_t)
        raise AssertionError("generator bug: a helper ended without a return")


def walk(stmts):
    """Every statement and expression node under ``stmts`` (statements or expressions),
    parents first."""
    for s in stmts:
        if isinstance(s, Expr):
            yield from _walk_expr(s)
            continue
        yield s
        for e in s.exprs():
            yield from _walk_expr(e)
        for block in s.blocks():
            yield from walk(block)


def _walk_expr(e):
    yield e
    for a in (*getattr(e, "args", ()), *getattr(e, "more", ())):
        yield from _walk_expr(a)
    if isinstance(e, Read):
        for a in e.index:
            yield from _walk_expr(a)
