"""Source spans and caret rendering for diagnostics.

A Span points at a range of one source line of the user's kernel. It is created by the frontend
from AST node positions (already shifted to the file's real line numbers) and carried by IR ops,
so that errors raised by later passes and by the runtime still point at user code. A span inside
a device function (``@fearless.func``, inlined at each call) also carries the chain of calls that
brought it into the kernel, rendered as a note under the caret.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CallSite:
    """One inlining step: device function ``function``, defined at ``defined`` (``file:line``
    of its ``def``), called by ``caller`` (``"kernel 'k'"`` or ``"device function 'g'"``) at
    ``at`` (``file:line`` of the call)."""

    function: str
    defined: str
    caller: str
    at: str


@dataclass(frozen=True)
class Span:
    """A half-open column range ``[col, end_col)`` on line ``line`` (1-based) of ``filename``.

    ``col`` is 0-based like Python's AST; rendering shows it 1-based, like compilers do.
    ``text`` is the whole source line, kept so a diagnostic renders without rereading the file.
    ``inlined``: the calls that inlined this line into the kernel, innermost first (empty for a
    line of the kernel itself).
    """

    filename: str
    line: int
    col: int
    end_col: int
    text: str
    inlined: tuple[CallSite, ...] = ()

    def location(self) -> str:
        return f"{self.filename}:{self.line}:{self.col + 1}"

    def render(self) -> str:
        """``--> file:line:col``, the source line, a caret under the span, and the call chain."""
        gutter = " " * len(str(self.line))
        width = max(1, min(self.end_col, len(self.text)) - self.col)
        text = (
            f"{gutter}--> {self.location()}\n"
            f"{gutter} |\n"
            f"{self.line} | {self.text}\n"
            f"{gutter} | {' ' * self.col}{'^' * width}"
        )
        if self.inlined:
            first = self.inlined[0]
            steps = [f"in device function '{first.function}' ({first.defined})"]
            steps += [f"called from {c.caller} ({c.at})" for c in self.inlined]
            text += f"\n{gutter} = note: " + f",\n{gutter}         ".join(steps)
        return text
