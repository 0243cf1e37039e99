"""Calls of device functions (``@fearless.func``): bind the arguments as Python does, then inline.

Binding follows Python's rules (and Triton's ``@jit`` functions): positional arguments, then
keyword arguments by name, then the defaults of the parameters left, which Python evaluated once
when the ``def`` ran (``fn.__defaults__``/``__kwdefaults__``) and which must be values a kernel
can hold (numbers, tuples, dtypes, functions). Positional-only and keyword-only parameters keep
their meaning; ``*args`` and ``**kwargs`` parameters, and ``*``/``**`` at the call, are refused.
Each mistake is a CompileError with a caret under the call or the offending argument.

The body is then generated in place (``FunctionGen`` with its own variable slots), with the call
chain recorded on every span it creates, so that a diagnostic inside names the function and the
call sites that brought it into the kernel.
"""
from __future__ import annotations

import ast
import difflib
import inspect
from typing import TYPE_CHECKING

from fearless.frontend import intrinsics
from fearless.frontend.infer import Static, TypingError
from fearless.frontend.spans import CallSite
from fearless.ir.core import Region
from fearless.ir.opdef import Op

if TYPE_CHECKING:
    from fearless.frontend.astgen import FunctionGen


def call(gen: "FunctionGen", func, node: ast.Call):
    """The value of ``func(...)`` at ``node``: arguments bound, body inlined."""
    cap = func.captured
    ctx = gen.ctx
    if func in ctx.call_stack:
        raise gen.error(node, f"'{cap.name}' calls itself; recursion is not supported")
    ctx.inline_count += 1
    prefix = f"{cap.name}#{ctx.inline_count}."
    returns = [n for n in ast.walk(cap.tree) if isinstance(n, ast.Return)]
    tail = cap.tree.body[-1] if cap.tree.body else None
    simple = len(returns) == 1 and returns[0] is tail and tail.value is not None
    at = gen.span(node)
    site = CallSite(cap.name, f"{cap.filename}:{cap.tree.lineno}", gen.describe_self(),
                    f"{at.filename}:{at.line}")
    callee = type(gen)(ctx, cap, prefix, None if simple else prefix + "<return>",
                       (site, *gen.inlined))
    values = bind(gen, callee, func, node)
    a = cap.tree.args
    pnodes = {p.arg: p for p in a.posonlyargs + a.args + a.kwonlyargs}
    ctx.call_stack.append(func)
    try:
        for name, value in values.items():
            callee.bind_param(name, value, pnodes[name])
        if simple:  # one trailing `return expr`: no region, the value flows through
            callee.body(cap.tree.body[:-1])
            return callee.visit(tail.value)
        region = Region()
        gen.b.create(Op.SCF_INLINE, [], attrs={"name": cap.name}, regions=[region])
        with gen.b.at(region):
            callee.body(cap.tree.body)
        if callee.returned is None:
            return Static(None)
        return callee.read_binding(callee.returned)
    finally:
        ctx.call_stack.pop()


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def bind(gen: "FunctionGen", callee: "FunctionGen", func, node: ast.Call) -> dict:
    """Frontend values of ``func``'s parameters for the call ``node`` in ``gen``, by parameter
    name, in the order of the ``def`` (``callee`` generates the body: errors in the ``def``'s
    defaults point there)."""
    cap = func.captured
    a = cap.tree.args
    name = cap.name
    star = a.vararg or a.kwarg
    if star:
        raise callee.error(star, f"device function '{name}' has a {'*' if a.vararg else '**'}"
                                 f"{star.arg} parameter; device functions take named "
                                 f"parameters only")
    posonly = [p.arg for p in a.posonlyargs]
    positional = posonly + [p.arg for p in a.args]
    every = positional + [p.arg for p in a.kwonlyargs]
    listing = f"the signature is {name}{inspect.signature(func.fn)}"
    for arg in node.args:
        if isinstance(arg, ast.Starred):
            raise gen.error(arg, "*arguments are not supported in calls inside kernels",
                            help="pass each argument by itself")
    if len(node.args) > len(positional):
        raise gen.error(node.args[len(positional)],
                        f"'{name}' takes {_plural(len(positional), 'positional argument')}, "
                        f"got {len(node.args)}", help=listing)
    bound = {p: gen.visit(arg) for p, arg in zip(positional, node.args)}
    for kw in node.keywords:
        if kw.arg is None:
            raise gen.error(kw, "**arguments are not supported in calls inside kernels",
                            help="pass each argument by name")
        if kw.arg not in every:
            close = difflib.get_close_matches(kw.arg, every, n=1)
            raise gen.error(kw, f"'{name}' has no parameter '{kw.arg}'",
                            help=f"did you mean '{close[0]}'? ({listing})" if close else listing)
        if kw.arg in posonly:
            raise gen.error(kw, f"parameter '{kw.arg}' of '{name}' is positional-only",
                            help="pass it by position")
        if kw.arg in bound:
            raise gen.error(kw, f"'{name}' got two values for parameter '{kw.arg}'",
                            help=listing)
        bound[kw.arg] = gen.visit(kw.value)
    defaults = _defaults(func.fn, a)
    missing = [p for p in every if p not in bound and p not in defaults]
    if missing:
        names = ", ".join(f"'{p}'" for p in missing)
        raise gen.error(node, f"'{name}' is missing {_plural(len(missing), 'argument')}: "
                              f"{names}", help=listing)
    for p in every:
        if p not in bound:
            bound[p] = _default_value(callee, p, defaults[p])
    return {p: bound[p] for p in every}


def _defaults(fn, a: ast.arguments) -> dict:
    """Parameter name -> the default value Python evaluated when the ``def`` ran."""
    positional = [p.arg for p in a.posonlyargs + a.args]
    values = fn.__defaults__ or ()
    out = dict(zip(positional[len(positional) - len(values):], values))
    out.update(fn.__kwdefaults__ or {})
    return out


def _default_value(callee: "FunctionGen", param: str, value):
    cap = callee.cap
    try:
        return intrinsics.from_python(value)
    except TypingError as exc:
        a = cap.tree.args
        nodes = dict(zip([p.arg for p in a.posonlyargs + a.args][::-1], a.defaults[::-1]))
        nodes.update((p.arg, d) for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None)
        raise callee.error(nodes.get(param, cap.tree),
                           f"the default of parameter '{param}' of '{cap.name}': {exc}",
                           help="a default is evaluated once, when the def runs: use a number, "
                                "a tuple, a dtype or a function") from None
