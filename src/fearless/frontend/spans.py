"""Source spans and caret rendering for diagnostics.

A Span points at a range of one source line of the user's kernel. It is created by the frontend
from AST node positions (already shifted to the file's real line numbers) and carried by IR ops,
so that errors raised by later passes and by the runtime still point at user code.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Span:
    """A half-open column range ``[col, end_col)`` on line ``line`` (1-based) of ``filename``.

    ``col`` is 0-based like Python's AST; rendering shows it 1-based, like compilers do.
    ``text`` is the whole source line, kept so a diagnostic renders without rereading the file.
    """

    filename: str
    line: int
    col: int
    end_col: int
    text: str

    def location(self) -> str:
        return f"{self.filename}:{self.line}:{self.col + 1}"

    def render(self) -> str:
        """``--> file:line:col``, the source line, and a caret under the span."""
        gutter = " " * len(str(self.line))
        width = max(1, min(self.end_col, len(self.text)) - self.col)
        return (
            f"{gutter}--> {self.location()}\n"
            f"{gutter} |\n"
            f"{self.line} | {self.text}\n"
            f"{gutter} | {' ' * self.col}{'^' * width}"
        )
