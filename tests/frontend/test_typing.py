"""The typing stage (frontend/typing.py): each variable's type, found before emission, and the
``--stage types`` text that shows them."""
from __future__ import annotations

from pathlib import Path

import pytest

import fearless as fl
import fearless.tile as ft
from fearless import cli
from fearless.errors import CompileError
from fearless.frontend import astgen, typing
from fearless.ir import types as T


def _types(kernel, **signature) -> typing.Types:
    params = list(zip([p.name for p in kernel.runtime_params],
                      cli.param_types(kernel, {k: (v, None, None) for k, v in signature.items()})))
    return typing.infer(kernel.captured, params)


def _slot(types: typing.Types, key: str) -> str:
    return str(types.slots[key])


def _line(text: str) -> int:
    """The line of this file that starts (after its indentation) with ``text``."""
    lines = Path(__file__).read_text().splitlines()
    return next(n for n, line in enumerate(lines, 1) if line.strip().startswith(text))


@fl.kernel
def flow(x: fl.Slice[fl.f32], n: fl.i32, out: fl.DisjointSlice[fl.f32]):
    i = fl.thread.index_1d()
    if i < len(out):
        acc = 0
        for j in range(n):
            acc += x[j]
        count = 0
        while count < n:
            count += 1
        flag = False
        if x[i] > 0.0:
            flag = True
        out[i] = acc + count + flag


def test_types_across_if_for_and_while():
    types = _types(flow)
    # acc: 0 guesses i64 (a Python int's type), acc + x[j] is f32, and f32 joined with the
    # literal is f32; the second round, with acc f32, repeats it
    assert _slot(types, "acc") == "f32" and types.rounds == 2
    assert _slot(types, "count") == "i64"  # 0 and i64 + 1: a literal adapts
    assert _slot(types, "flag") == "bool"
    assert _slot(types, "j") == "i64"  # a range() counter
    assert "i" not in types.slots  # bound once, where it dominates its uses: no slot


@fl.kernel
def literals(x: fl.Slice[fl.i8], out: fl.DisjointSlice[fl.i64]):
    i = fl.thread.index_1d()
    if i < len(out):
        first_default = 0
        for j in range(4):
            first_default = first_default + x[j]
        narrow = x[0]
        for j in range(4):
            narrow = narrow + 1
        half = 1
        if i > 2:
            half = 0.5
        out[i] = first_default + narrow + fl.i64(half)


def test_weak_literals_take_the_other_operands_type_and_start_at_their_default():
    types = _types(literals)
    # the fixpoint starts at the literal's default, and i64 + i8 stays i64 (not i8: the
    # rule the fuzzer's reference follows too)
    assert _slot(types, "first_default") == "i64"
    assert _slot(types, "narrow") == "i8"  # i8 + 1 is an i8
    assert _slot(types, "half") == "f64"  # an int literal and a float literal: Python's float
    # 0.5 does not fit half's first slot, i64, and is left out, but the read of half sees
    # what is assigned above it, f64: the round computed what the next would
    assert types.rounds == 1


@fl.kernel
def shrinks(x: fl.Slice[fl.i8], out: fl.DisjointSlice[fl.i64]):
    i = fl.thread.index_1d()
    if i < len(out):
        y = 0
        r = 0
        for j in range(4):
            r = y // 2
            y = x[j]
        out[i] = r


def test_a_guess_that_a_later_round_no_longer_assigns_is_dropped():
    """Round 1 reads y as an i64 (all that is assigned to it above the read), so r is an i64;
    round 2 has y an i8 (0 and an i8) and r = y // 2 an i8, which round 3 confirms: r's first
    type is dropped, so that literals keep their narrow types."""
    types = _types(shrinks)
    assert (_slot(types, "y"), _slot(types, "r"), types.rounds) == ("i8", "i8", 3)


def test_after_widen_after_rounds_types_only_widen(monkeypatch):
    """Past WIDEN_AFTER rounds a variable keeps the join of its guesses (which ends: each
    climbs a finite ladder of types), so r keeps round 1's i64."""
    monkeypatch.setattr(typing, "WIDEN_AFTER", 0)
    types = _types(shrinks)
    assert (_slot(types, "y"), _slot(types, "r"), types.rounds) == ("i8", "i64", 2)


def test_types_that_do_not_settle_are_an_error_naming_the_variables(monkeypatch):
    monkeypatch.setattr(typing, "MAX_ROUNDS", 2)
    with pytest.raises(CompileError, match="the types of 'r' did not settle in 2 passes") as info:
        _types(shrinks)
    assert info.value.span.line == _line("def shrinks(")
    assert "annotate the variable (x: f32 = ...)" in info.value.help


@fl.func
def positive_or_half(a, b):
    if a > 0:
        return a
    return b


@fl.kernel
def divided(a: fl.Slice[fl.i32], b: fl.Slice[fl.f16], out: fl.DisjointSlice[fl.f32]):
    i = fl.thread.index_1d()
    if i < len(out):
        v = positive_or_half(a[i], b[i])
        v /= a[i]
        w = a[i]
        w = b[i]
        w /= a[i]
        out[i] = v + w


def test_a_guessed_read_sees_the_join_of_the_assignments_above_it():
    """Fuzz seed 29474: read as its first assignment alone (the helper's first return, an i32),
    v /= a[i] is a true division, f64, and an f64 v keeps itself f64. Read as the join of what
    is assigned above (i32 and f16: f16), v stays an f16, as its assignments say; w too."""
    types = _types(divided)
    assert (_slot(types, "v"), _slot(types, "w")) == ("f16", "f16")
    assert _slot(types, "positive_or_half#1.<return>") == "f16"


@fl.func
def halve(v):
    if v > 2:
        return 0
    return v / 2


@fl.func
def twice(v):
    return v + v


@fl.kernel
def calls(x: fl.Slice[fl.f32], k: fl.Slice[fl.i16], out: fl.DisjointSlice[fl.f32]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = halve(x[i]) + halve(k[i]) + twice(k[i])


def test_device_functions_are_typed_per_call_site():
    types = _types(calls)
    # each call has its own slots: the return joins 0 with v / 2, f32 for an f32 argument and
    # f64 (true division of an integer) for an i16 one; `twice` returns its one expression,
    # with no slot
    assert _slot(types, "halve#1.<return>") == "f32"
    assert _slot(types, "halve#2.<return>") == "f64"
    assert not any(key.startswith("twice") for key in types.slots)
    params = {(v.scope, v.name): v.type for v in types.variables if v.param}
    assert params[("halve#1.", "v")] == "f32" and params[("halve#2.", "v")] == "i16"
    assert params[("twice#3.", "v")] == "i16"
    at = f"test_typing.py:{_line('out[i] = halve(x[i])')}"
    assert [(s.function, s.called) for s in types.scopes] == [
        ("calls", ""), ("halve", at), ("halve", at), ("twice", at)]


@fl.kernel
def declared(x: fl.Slice[fl.f32], out: fl.DisjointSlice[fl.f32]):
    i = fl.thread.index_1d()
    if i < len(out):
        acc: fl.f64 = 0
        for j in range(4):
            acc += x[j]
        out[i] = acc


def test_an_annotation_fixes_the_type():
    assert _slot(_types(declared), "acc") == "f64"


@fl.kernel
def tuples(x: fl.Slice[fl.f32], out: fl.DisjointSlice[fl.f32]):
    i = fl.thread.index_1d()
    if i < len(out):
        acc = tuple(0 for _ in range(3))
        for j in range(4):
            acc = tuple(acc[k] + x[j] for k in range(3))
        out[i] = acc[0] + acc[1] + acc[2]


def test_a_tuple_variable_has_a_slot_per_element():
    types = _types(tuples)
    assert [_slot(types, f"acc[{k}]") for k in range(3)] == ["f32"] * 3
    assert "acc  (f32,) * 3  (2 assignments)" in typing.show(types)


@ft.kernel
def tile_sum(x: ft.In[fl.f32], out: ft.Out[fl.f32]):
    acc = ft.zeros((16,), fl.f32)
    for k in range(4):
        acc = acc + ft.load(x, (k,), (16,))
    out.store(acc)


def test_tile_values_are_typed_too():
    params = [("x", T.TensorView(fl.f32, 1, T.Role.IN)),
              ("out", T.TensorView(fl.f32, 1, T.Role.OUT, (16,)))]
    types = typing.infer(tile_sum.captured, params, astgen_tile())
    assert _slot(types, "acc") == "tile<16xf32>" and _slot(types, "k") == "i64"


def astgen_tile():
    from fearless.compiler.pipeline import TILE
    return TILE


@fl.kernel
def wrong_literal(x: fl.Slice[fl.u8], out: fl.DisjointSlice[fl.u8]):
    i = fl.thread.index_1d()
    if i < len(out):
        v = 300
        if i > 0:
            v = x[i]
        out[i] = v


def test_an_assignment_that_does_not_fit_the_final_type_is_raised_by_emission():
    """The typing stage settles v at u8 (the literal adapts); 300 does not fit, which the
    emission raises with its caret, as the old strict pass did."""
    types = _types(wrong_literal)
    assert _slot(types, "v") == "u8"
    with pytest.raises(CompileError, match="cannot assign 300 to variable 'v' \\(u8\\)") as info:
        astgen.generate(wrong_literal.captured,
                        list(zip(["x", "out"], cli.param_types(wrong_literal, {}))), types.slots)
    assert info.value.span.text.strip() == "v = 300"


@fl.kernel
def text(out: fl.DisjointSlice[fl.f32]):
    i = fl.thread.index_1d()
    out[i] = i + "one"


@fl.kernel
def text_after_a_guess(out: fl.DisjointSlice[fl.f32]):
    i = fl.thread.index_1d()
    v = 0
    if i > 0:
        v = 1.5
    out[i] = v + "one"


def test_an_error_keeps_its_caret_whichever_stage_meets_it():
    """A round that ran with the settled types (here: there are none) raises its error; after
    a round that stored 1.5 in v's first guess (i64), emission, which walks with v an f64,
    raises the kernel's first error in program order."""
    with pytest.raises(CompileError, match="str constants are not supported") as info:
        _types(text)
    assert info.value.span.text.strip() == 'out[i] = i + "one"'
    types = _types(text_after_a_guess)
    assert _slot(types, "v") == "f64"
    with pytest.raises(CompileError, match="str constants are not supported") as info:
        text_after_a_guess.inspect("ir", cli.param_types(text_after_a_guess, {}))
    assert info.value.span.text.strip() == 'out[i] = v + "one"'


def test_emission_walks_once_with_the_types_known(monkeypatch):
    walks, walk = [], astgen.walk
    for module in (astgen, typing):
        monkeypatch.setattr(module, "walk",
                            lambda ctx, *a: walks.append(ctx.typing) or walk(ctx, *a))
    flow.inspect("ir", cli.param_types(flow, {}))
    assert walks == [True, True, False]


def test_inspect_stage_types(capsys):
    assert cli.main(["inspect", f"{__file__}:calls", "--stage", "types"]) == 0
    text = capsys.readouterr().out
    lines = [line.rstrip() for line in text.splitlines()]
    assert lines[:2] == ["// kernel calls, stage types", "// types settled in 1 round"]
    kernel, halve_def = _line("def calls("), _line("def halve(")
    assert lines[2] == f"kernel 'calls' (test_typing.py:{kernel})"
    assert f"  {kernel + 1:>5}  i    tid<1d, axis 0>" in lines
    call = lines.index(f"device function 'halve' (test_typing.py:{halve_def}), inlined at "
                       f"test_typing.py:{_line('out[i] = halve(x[i])')}")
    assert lines[call + 1:call + 3] == [f"  {halve_def:>5}  v         f32  (parameter)",
                                        f"  {_line('return 0'):>5}  <return>  f32  (2 assignments)"]
    text = flow.inspect("types", cli.param_types(flow, {})).splitlines()
    assert f"  {_line('acc = 0'):>5}  acc    f32  (2 assignments)" in text
