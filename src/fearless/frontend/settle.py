"""Variable types: the frontend's fixpoint over ``astgen``'s passes (AST -> IR).

A variable's type is the join of every type assigned to it (``infer.join``), and what is
assigned may depend on variables' types (``w = v * 2``), the variable's own too (``v /= n``).
``generate`` regenerates the function until the types stop changing, each pass typing every
slot by what the previous pass saw assigned. The first pass guesses: a read sees the join of
what was assigned to the name above it in the source (``GenContext.guessed``), so ``acc = 0``
then ``acc += x[i]`` starts from the literal's default type (an i8 ``x`` leaves ``acc`` i64).
"""
from __future__ import annotations

from fearless.errors import CompileError
from fearless.frontend.astgen import SIMT, Dialect, GenContext, _generate_once
from fearless.frontend.capture import Captured
from fearless.frontend.infer import widened
from fearless.ir import types as T
from fearless.ir.core import Builder, Function, Region

_MAX_PASSES = 64  # each regenerates the IR; most kernels settle in 2 or 3
_WIDEN_AFTER = 16  # passes; kernels that settled within them keep exactly their old types


def generate(cap: Captured, params: list[tuple[str, T.Type]], dialect: Dialect = SIMT,
             constants: dict | None = None) -> Function:
    """The IR of kernel ``cap`` for parameter types ``params``. Raises CompileError.

    ``constants`` binds compile-time parameters (a tile kernel's ``ft.Const``) by name; they
    are not parameters of the IR function.
    """
    var_types: dict = {}
    failed: set = set()
    for attempt in range(_MAX_PASSES):
        ctx = GenContext(cap.name, var_types, Builder(Region()), dialect=dialect)
        error, fn = None, None
        try:
            fn = _generate_once(ctx, cap, params, constants or {})
        except CompileError as exc:
            error = exc
        new_types, join_errors = ctx.unified()
        again = [key for key in join_errors if key in failed]
        if again or (join_errors and new_types == var_types):
            raise join_errors[(again or list(join_errors))[0]]
        failed |= set(join_errors)
        if attempt >= _WIDEN_AFTER:  # still moving (fuzz seed 11214 went round in circles):
            # from now on types only widen, which ends, as each variable climbs a finite ladder
            # of types. Before, a guess that a later pass no longer assigns may be dropped, so
            # that literals keep their narrow types.
            new_types = widened(var_types, new_types)
        if new_types == var_types:
            if ctx.deferred:  # an assignment's error, raised where and as a strict pass meets it
                strict = GenContext(cap.name, var_types, Builder(Region()), dialect=dialect,
                                    lenient=False)
                return _generate_once(strict, cap, params, constants or {})
            if error is not None:
                raise error
            return fn
        moving, var_types = [k for k in new_types if new_types[k] != var_types.get(k)], new_types
    raise CompileError(f"the types of {_describe_keys(moving)} did not settle in {_MAX_PASSES} "
                       "passes", kernel=cap.name, span=cap.span(cap.tree),
                       help="give each of them one type: annotate the variable (x: f32 = ...) "
                            "or convert what is assigned or returned")


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
