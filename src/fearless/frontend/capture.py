"""Capture a kernel's source: the AST with real file positions, and the names it refers to.

The AST's line numbers are shifted to the file's, and ``span()`` adds back the indentation that
dedenting removed, so diagnostics point at the real file:line:col. Free names resolve like Python
does (closure cells, then module globals, then builtins) and are frozen at compile time.
"""
from __future__ import annotations

import ast
import builtins
import inspect
import linecache
import textwrap
from collections import Counter
from dataclasses import dataclass, field

from fearless.errors import CompileError
from fearless.frontend.spans import Span

_MISSING = object()


@dataclass
class Captured:
    """A function's source, AST and namespace, as the frontend needs them."""

    fn: object
    name: str
    filename: str
    source: str
    tree: ast.FunctionDef
    indent: int
    assign_counts: Counter = field(default_factory=Counter)

    def span(self, node: ast.AST) -> Span:
        line = getattr(node, "lineno", self.tree.lineno)
        col = getattr(node, "col_offset", 0) + self.indent
        end_line = getattr(node, "end_lineno", line)
        text = linecache.getline(self.filename, line).rstrip("\n")
        end_col = (getattr(node, "end_col_offset", None) or 0) + self.indent
        if end_line != line or end_col <= col:
            end_col = len(text)
        return Span(self.filename, line, col, end_col, text)

    def resolve(self, name: str):
        """The value ``name`` has in the function's closure, globals or builtins, or _MISSING."""
        fn = self.fn
        code = fn.__code__
        if name in code.co_freevars and fn.__closure__:
            cell = fn.__closure__[code.co_freevars.index(name)]
            try:
                return cell.cell_contents
            except ValueError:  # an empty cell: the closure variable is not bound yet
                return _MISSING
        if name in fn.__globals__:
            return fn.__globals__[name]
        return getattr(builtins, name, _MISSING)

    def free_names(self) -> list[str]:
        """Names the body reads that are not its own locals, in first-use order."""
        seen: dict[str, None] = {}
        for node in ast.walk(self.tree):
            if (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
                    and node.id not in self.assign_counts and node.id not in seen):
                seen[node.id] = None
        return list(seen)


def capture(fn) -> Captured:
    """Read ``fn``'s source and parse it. Raises CompileError when there is no source to read."""
    try:
        lines, first = inspect.getsourcelines(fn)
        filename = inspect.getsourcefile(fn) or "<unknown>"
    except (OSError, TypeError) as exc:
        raise CompileError(f"cannot read the source of {getattr(fn, '__name__', fn)!r}: {exc}",
                           help="define kernels in a .py file (not an interactive prompt)") from None
    raw = "".join(lines)
    source = textwrap.dedent(raw)
    indent = len(lines[0]) - len(lines[0].lstrip()) if source != raw else 0
    module = ast.parse(source)
    ast.increment_lineno(module, first - 1)
    tree = next((n for n in module.body if isinstance(n, ast.FunctionDef)), None)
    if tree is None:
        raise CompileError(f"{fn.__name__!r} is not a plain 'def' function")
    a = tree.args
    counts: Counter = Counter(p.arg for p in a.posonlyargs + a.args + a.kwonlyargs)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            counts[node.id] += 1
    return Captured(fn, fn.__name__, filename, source, tree, indent, counts)


MISSING = _MISSING
