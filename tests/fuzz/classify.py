"""Which bug class a program may hit (read off its tree), and which one a failure belongs to.

``known_in`` finds the constructs of the known classes (``options.KNOWN``) in a generated
program, so ``--skip-known`` can generate another. ``crash_class`` names a compile failure by its
message, ``mismatch_class`` a wrong result by the operations the reference saw on the way.
"""
from __future__ import annotations

import math
import re

from fearless import dtypes
from tests.fuzz import rules, scalar
from tests.fuzz.options import KNOWN
from tests.fuzz.stmts import Jump, walk

CRASHES = (
    (r"Operands must be the same type, got \((i8, i1|i1, i8)\)|cannot store i1 to i8|"
     r"cannot store i8 to i1|with type 'i(1|8)' but expected 'i(8|1)'|"
     r"assert lhs.type == rhs.type", "bool-i8"),  # the last: a select of i8 and i1
    (r"float too large to pack", "f16-const-overflow"),
    (r"tileiras crashed", "tileiras-crash"),  # seed 2968: a load in an `if` after a tile loop
    # seed 55660: minutes on a while loop with eight exits under ifs (harness.TILEIRAS_SECONDS)
    (r"tileiras did not finish within", "tileiras-slow"),
    (r"KeyError: '(min|max)'", "literal-minmax"),
    (r"Python integer .* out of bounds|OverflowError: Python int|expected number, got int",
     "literal-cast-range"),
)
MISMATCH_TAGS = (("bf16<-wide", "bf16-rounding"), ("float //,%", "float-floordiv"))
# wrong values that a GPU toolchain ``fearless doctor`` fails explains, where our PTX is right:
# (the reference's tag, the class). nvJitLink 13.0 drops the sign extension after neg.s16 and
# abs.s16, so -x and abs(x) of an i16 -32768, widened, give +32768 (seeds 5545, 53488)
TOOLCHAIN_TAGS = (("i16 -(-32768)", "nvjitlink-neg16"),)


def known_in(program) -> set[str]:
    """The known classes (``options.KNOWN``) whose constructs ``program`` contains."""
    found = set()
    for stmts in [program.body] + [h.body for h in getattr(program.gen, "helpers", ())]:
        found |= known_under(stmts)
    for h in getattr(program.gen, "helpers", ()):
        if not h.simple:
            found |= _converting([(s.e, h.ret_t) for s in walk(h.body)
                                  if isinstance(s, Jump) and s.e is not None])
    return found & set(KNOWN)


def known_under(stmts) -> set[str]:
    """The known classes of the statements or expressions ``stmts`` and everything below
    (only those still open: ``options.KNOWN``)."""
    found = set()
    for node in walk(stmts):
        found |= node.known() | _converting(node.conversions())
    return found & set(KNOWN)


def _converting(conversions) -> set[str]:
    found = set()
    for e, d in conversions:
        if d.is_float and e.const and not isinstance(e.value, bool):
            v = float(e.value)
            if math.isfinite(v) and abs(v) > scalar.MAX_FINITE[d.name]:
                found.add("f16-const-overflow")
        if d in (dtypes.i8, dtypes.u8) and e.t is dtypes.bool_:
            found.add("bool-i8")
        if d is dtypes.bf16 and not rules.is_weak(e.t) and (
                e.t is dtypes.f64 or (e.t.is_int and e.t.bits >= 32)):
            found.add("bf16-rounding")
    return found


def crash_class(text: str, known=()) -> str:
    """A short name for a compile failure: a known class by its message, else, when the kernel
    holds constructs of known classes, those (``maybe: ...``), else the exception's gist."""
    for pattern, name in CRASHES:
        if re.search(pattern, text):
            return name
    if known:
        return "maybe: " + ", ".join(sorted(known))
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    errors = [ln for ln in lines if re.search(r"[A-Za-z]+(Error|Exception)\b|error:", ln)]
    gist = errors[-1] if errors else (lines[-1] if lines else text)
    gist = re.sub(r"0x[0-9a-f]+|\d+", "N", gist)
    gist = re.sub(r"'[^']*'", "'…'", gist)
    return "new: " + gist[:120]


def toolchain_bugs() -> frozenset[str]:
    """The ``TOOLCHAIN_TAGS`` classes the GPU toolchain in this process has (device mode)."""
    from fearless.runtime import module
    return frozenset({"nvjitlink-neg16"} if module.nvjitlink_problem() else ())


def mismatch_class(tags: frozenset, known=(), toolchain=frozenset()) -> str:
    """A wrong value's class, from the operations the reference saw in its thread (only the
    classes still open count; the operations are listed in the detail anyway). ``toolchain``:
    the ``toolchain_bugs()`` of the GPU that computed it."""
    for tag, name in TOOLCHAIN_TAGS:
        if tag in tags and name in toolchain:
            return f"known: {name} (fearless doctor fails this toolchain)"
    for tag, name in MISMATCH_TAGS:
        if tag in tags and name in KNOWN:
            return name
    if known:
        return "maybe: " + ", ".join(sorted(known))
    return "new: wrong value"
