"""``intrinsic``: how a function of the kernel language (``fl.thread.index_1d``, ``ft.load``...)
is defined, for both tracks.

Each intrinsic is written as a plain ``def`` with its real signature, annotations (for type
checkers: see ``fearless.simt.views``) and docstring (for ``help()``); the decorator keeps those
(``functools.wraps``: ``__wrapped__``, so ``inspect.signature`` shows the real parameters) and
replaces the body with a clear error, since the compiler recognises the function object inside a
kernel and never calls it. Called on the host, it raises CompileError, whose traceback shows
the caller's frame, not this module's.
"""
from __future__ import annotations

import functools
from typing import Callable, TypeVar

from fearless.errors import CompileError
from fearless.tracebacks import user_facing

F = TypeVar("F", bound=Callable)


def intrinsic(prefix: str, inside: str = "a @fearless.kernel or @fearless.func",
              help: str = "launch the kernel through kernel.prepare(...) instead"):
    """A decorator for the intrinsics of one module: ``prefix`` is how users spell the module
    (``"fearless.warp"``), ``inside`` what may call them, ``help`` the advice on the host."""
    def decorate(fn: F) -> F:
        def outside(*args, **kwargs):
            raise CompileError(f"{prefix}.{fn.__name__}() can only be called inside {inside}",
                               help=help)
        # the error shows the user's frame only (tracebacks.py); same signature via __wrapped__
        return user_facing(functools.wraps(fn)(outside))  # type: ignore[return-value]
    return decorate
