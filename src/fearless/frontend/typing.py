"""The typing stage: every variable's type, computed before emission (``inspect --stage types``).

A name bound once to a value that dominates its uses keeps that value (``astgen``). Every other
variable lives in a typed slot, and a slot's type is the join (``infer.join``) of every value
assigned to it over the whole function, device functions inlined at each call with slots of
their own (their ``<return>`` slot too). The type of an assigned value depends on the types of
the variables it reads (``acc = acc + x[i]``), so the types are a fixpoint, found in rounds:

* a round walks the kernel with astgen's own visitors in typing mode (``GenContext.typing``):
  every expression is typed by the rules emission uses (``infer``, ``emit``, the intrinsics of
  both dialects), its IR is thrown away, a read of a variable makes no op, and an assignment
  that does not convert to the variable's current guess is left out and noted;
* a variable no earlier round typed is guessed: its slot takes the type of its first
  assignment, and a read sees the join of what was assigned to it above, in source order (so
  ``acc = 0`` then ``acc += x[i]`` reads ``acc`` as an i64, a Python int's type); the next
  round gives it the join of what this round assigned it;
* the types have settled when every read of a variable in a round saw the join of what the
  round assigned it: the next round would compute what this one did. Most kernels settle in
  one round, some in two or three;
* a variable whose assignments have no common type is an error once it happens twice or the
  other types settled; after WIDEN_AFTER rounds types only widen, which ends, as each variable
  climbs a finite ladder of types; past MAX_ROUNDS the kernel is refused, naming the variables.

Emission (``astgen.generate``) then walks the kernel once, with these types, and never retries.
An error that ends a settled round whose slots had the settled types is raised here (the kernel
is wrong whatever the guesses); otherwise emission raises the kernel's first error in program
order, such as an assignment that does not convert to its variable's settled type.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

from fearless.errors import CompileError
from fearless.frontend.astgen import SIMT, Dialect, GenContext, walk
from fearless.frontend.capture import Captured
from fearless.frontend.emit import describe
from fearless.frontend.infer import Const, TupleValue, TypingError, join, widened
from fearless.frontend.spans import Span
from fearless.ir import types as T
from fearless.ir.core import Builder, Region, Value
from fearless.ir.opdef import REGISTRY

MAX_ROUNDS = 64
WIDEN_AFTER = 16  # rounds; kernels that settled within them keep exactly their old types


@dataclass(frozen=True)
class Variable:
    """One variable of the kernel or of one inlined call, for ``inspect --stage types``."""

    scope: str        # "" for the kernel, "f#3." for the third call inlined (of f)
    name: str         # "acc", "acc[0][1]" (an element of a tuple), "<return>"
    type: str         # the slot's type, or what a name bound once holds
    span: Span        # its first assignment
    assigned: int     # assignments seen (0: a name bound once, or a parameter)
    param: bool = False


@dataclass(frozen=True)
class Scope:
    prefix: str
    function: str     # the kernel's or the device function's name
    defined: str      # file:line of its def
    called: str       # "" for the kernel, else file:line of the call that inlined it


@dataclass(frozen=True)
class Types:
    """What the typing stage found: the type of every slot (what emission reads) and, for
    printing, the variables of each function."""

    kernel: str
    slots: Mapping[str, T.Type]
    variables: tuple[Variable, ...]
    scopes: tuple[Scope, ...]
    rounds: int


def infer(cap: Captured, params: list[tuple[str, T.Type]], dialect: Dialect = SIMT,
          constants: dict | None = None) -> Types:
    """The types of kernel ``cap``'s variables for parameter types ``params`` (and the tile
    kernel's compile-time ``constants``). Raises CompileError."""
    guess: dict = {}
    failed: set = set()
    moving: list = []
    for rnd in range(MAX_ROUNDS):
        ctx = GenContext(cap.name, guess, _Scratch(Region()), dialect=dialect, typing=True)
        error = None
        try:
            walk(ctx, cap, params, constants or {})
        except CompileError as exc:
            error = exc
        new, join_errors = _unified(ctx)
        again = [key for key in join_errors if key in failed]
        if again or (join_errors and new == guess):
            raise join_errors[(again or list(join_errors))[0]]
        failed |= set(join_errors)
        if rnd >= WIDEN_AFTER:  # still moving (fuzz seed 11214 went round in circles): from
            # now on types only widen. Before, a guess that a later round no longer assigns may
            # be dropped, so that literals keep their narrow types.
            new = widened(guess, new)
        read = all(new[key] == t for key, t in ctx.reads)
        if read and all(new[key] == ctx.slots[key].type.elem for key in ctx.observed):
            # this round ran with the types it found: the next would repeat it
            if join_errors:
                raise join_errors[next(iter(join_errors))]
            if error is not None and not ctx.deferred:
                raise error
            return _types(ctx, new, rnd + 1)
        if read and not join_errors and rnd < WIDEN_AFTER:
            # every read saw its variable's settled type, so the next round would compute and
            # assign what this one did; only its stores would convert to the settled types,
            # which emission does (raising, in program order, what does not convert)
            return _types(ctx, new, rnd + 1)
        moving, guess = [k for k in new if new[k] != guess.get(k)], new
    raise CompileError(f"the types of {_describe_keys(moving)} did not settle in {MAX_ROUNDS} "
                       "passes", kernel=cap.name, span=cap.span(cap.tree),
                       help="give each of them one type: annotate the variable (x: f32 = ...) "
                            "or convert what is assigned or returned")


class _Typed:
    """An op of a typing round: its results, typed by the op's rule; kept nowhere."""

    __slots__ = ("results",)

    def __init__(self, results: list[Value]):
        self.results = results

    @property
    def result(self) -> Value:
        (only,) = self.results
        return only


class _Scratch(Builder):
    """The builder of a typing round, whose IR is thrown away: an op is only its results."""

    def create(self, name, operands, result_types=None, attrs=None, regions=None, span=None):
        if result_types is None:
            result_types = REGISTRY[name].result([v.type for v in operands], attrs or {})
        return _Typed([Value(t) for t in result_types])


def _unified(ctx: GenContext) -> tuple[dict, dict]:
    """Each variable's type from this round's assignments, and the variables whose assignments
    had no common type, with the error. Such a variable's next guess leaves out what this round
    computed from its own guess (an assignment of its slot's type): a literal's default type
    guessed in the first round must not refuse the kernel."""
    out, errors = dict(ctx.var_types), {}
    for key, seen in ctx.observed.items():
        if key in ctx.declared:
            out[key] = ctx.declared[key]
            continue
        try:  # this round's assignments only: a type an earlier round guessed must not widen
            # the variables computed from it
            out[key] = join([t for t, _ in seen])
        except TypingError as exc:
            errors[key] = CompileError(f"variable '{key.split('.')[-1]}' {exc}",
                                       kernel=ctx.kernel, span=seen[-1][1])
            guess = ctx.slots[key].type.elem
            rest = [t for t, _ in seen if t != guess]
            try:
                out[key] = join(rest) if rest else guess
            except TypingError:
                out[key] = guess
    return out, errors


def _describe_keys(keys) -> str:
    """Variable keys in the user's words: ``'x'``, ``the return value of 'f'``; the frontend's
    own slots (``<bool@...>``) left out."""
    names = set()
    for key in keys:
        scope, _, name = key.rpartition(".")
        if name == "<return>":
            names.add(f"the return value of '{scope.split('#')[0]}'")
        elif not name.startswith("<"):
            names.add(f"'{name}'")
    return ", ".join(sorted(names)) or "the kernel's variables"


def _types(ctx: GenContext, slots: dict, rounds: int) -> Types:
    """The record of the settled round ``ctx``."""
    variables = []
    for key, seen in ctx.observed.items():
        head, _, name = key.rpartition(".")
        variables.append(Variable(head + "." if head else "", name, str(slots[key]), seen[0][1],
                                  len(seen)))
    once: dict = {}
    for prefix, name, value, span, param in ctx.bound:  # static_range bodies bind once a turn
        text = _value_text(value)
        first = once.setdefault((prefix, name), (text, span, param, []))
        if text != first[0] and text not in first[3]:
            first[3].append(text)
    for (prefix, name), (text, span, param, others) in once.items():
        text = " | ".join([text, *others[:2]]) + (" | ..." if len(others) > 2 else "")
        variables.append(Variable(prefix, name, text, span, 0, param))
    scopes = []
    for prefix, (cap, inlined) in ctx.scopes.items():
        scopes.append(Scope(prefix, cap.name, f"{_short(cap.filename)}:{cap.tree.lineno}",
                            _short(inlined[0].at) if inlined else ""))
    return Types(ctx.kernel, MappingProxyType(dict(slots)), tuple(variables), tuple(scopes),
                 rounds)


def _value_text(fv) -> str:
    """What a name bound once holds, as ``inspect --stage types`` prints it."""
    if isinstance(fv, Value):
        return str(fv.type)
    if isinstance(fv, Const):
        return f"{fv.value!r} (a Python {fv.python_kind()})" if fv.weak else \
            f"{fv.dtype} constant {fv.value!r}"
    if isinstance(fv, TupleValue):
        return _tuple_text([_value_text(v) for v in fv.items])
    return describe(fv)


def _tuple_text(items: list[str]) -> str:
    if items and all(i == items[0] for i in items):
        return f"({items[0]},) * {len(items)}"
    return f"({', '.join(items)}{',' if len(items) == 1 else ''})"


def _short(filename: str) -> str:
    return filename.replace("\\", "/").rsplit("/", 1)[-1]


def show(types: Types) -> str:
    """The text of ``inspect --stage types``: per function (the kernel, then each inlined call),
    each variable's line, name and type; a tuple variable's elements as one tuple type."""
    lines = [f"// types settled in {types.rounds} round{'s' if types.rounds > 1 else ''}"]
    for scope in types.scopes:
        head = f"kernel '{scope.function}' ({scope.defined})" if not scope.called else \
            f"device function '{scope.function}' ({scope.defined}), inlined at {scope.called}"
        rows = _rows([v for v in types.variables if v.scope == scope.prefix])
        lines.append(head + ("" if rows else ": no variables"))
        width = max((len(r[1]) for r in rows), default=0)
        for line, name, text, note in rows:
            lines.append(f"  {line:>5}  {name:<{width}}  {text}{note}")
    return "\n".join(lines) + "\n"


def _rows(variables: list[Variable]) -> list[tuple]:
    """(line, name, type, note) per variable, in source order; the elements of a tuple
    variable (``acc[0][1]``) grouped into one tuple type."""
    groups: dict = {}
    for v in variables:
        base = v.name.split("[", 1)[0]
        groups.setdefault(base, []).append(v)
    rows = []
    for base, vs in groups.items():
        first = min(vs, key=lambda v: (v.span.line, v.span.col))
        if len(vs) == 1 and vs[0].name == base:
            text = vs[0].type
        else:
            text = _nested(base, {v.name[len(base):]: v.type for v in vs})
        count = max(v.assigned for v in vs)
        note = "  (parameter)" if first.param else \
            f"  ({count} assignments)" if count > 1 else ""
        rows.append((first.span.line, base, text, note))
    return sorted(rows, key=lambda r: r[0])


def _nested(base: str, items: dict) -> str:
    """The tuple type of slots ``[0]``, ``[1][0]``... (suffix -> type)."""
    if "" in items:
        return items[""]
    heads: dict = {}
    for suffix, t in items.items():
        index, _, rest = suffix[1:].partition("]")
        heads.setdefault(int(index), {})[rest] = t
    return _tuple_text([_nested(base, heads[i]) for i in sorted(heads)])
