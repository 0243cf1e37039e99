"""Keep fearless's own frames out of the tracebacks of user errors.

A ``FearlessError`` is about the user's code: its message already names the kernel, parameter and
source line, and the dozens of compiler frames above it only hide that. Each public entry point
(kernel launch, prepare, op, inspect, tile kernel calls, ``.sync()``, ...) is a *boundary*: a
user error leaving it gets a traceback with every frame of the fearless package removed, so
``python script.py``, Jupyter, pytest and ``traceback.format_exception`` all show the user's
frames and the message. The traceback object itself is trimmed (not the way it is printed), and
it is re-raised with a bare ``raise``, which (Python 3.11 and newer) adds no frame of its own.

Frames of the standard library entered from fearless (its AST visitors) go too; the user's
code that fearless calls back (a ``.then()`` callback) stays.

Not trimmed: ``InternalError`` (a bug in fearless: its frames are the point), any exception
that is not a ``FearlessError``, and everything when ``FEARLESS_TRACEBACK=1``.
"""
from __future__ import annotations

import contextlib
import functools
import os
import sys
import sysconfig
import threading
import warnings
from collections.abc import Callable
from typing import TypeVar, cast

from fearless.config import CONFIG
from fearless.errors import FearlessError, InternalError
from fearless.observe import STATS


F = TypeVar("F", bound=Callable)
_STDLIB = tuple({os.path.join(sysconfig.get_paths()[k], "") for k in ("stdlib", "platstdlib")})


def _is_internal(frame) -> bool:
    """A frame of code in the fearless package (also code it generated, such as a dataclass
    ``__init__``, whose globals are the package module's, and a module run with ``-m``)."""
    name = frame.f_globals.get("__name__") or ""
    if name == "__main__":  # `python -m fearless.cli`
        name = getattr(frame.f_globals.get("__spec__"), "name", "")
    return name == "fearless" or name.startswith("fearless.")


_DEFERRED = threading.local()


def warn_user(message: str, category: type) -> None:
    """``warnings.warn`` pointing at the user's line (``user_stacklevel``), or, inside
    ``deferred_warnings()`` on this thread, kept for the thread that asked for the work (a
    worker thread's stack has no user line)."""
    pending = getattr(_DEFERRED, "pending", None)
    if pending is not None:
        pending.append((message, category))
        return
    warnings.warn(message, category, stacklevel=user_stacklevel())


@contextlib.contextmanager
def deferred_warnings():
    """Within this block ``warn_user`` on this thread collects (message, category) pairs
    into the list it yields instead of warning."""
    saved = getattr(_DEFERRED, "pending", None)
    _DEFERRED.pending = []
    try:
        yield _DEFERRED.pending
    finally:
        _DEFERRED.pending = saved


def user_stacklevel() -> int:
    """The ``stacklevel`` that points a ``warnings.warn`` made by the caller of this function
    at the first frame outside fearless (the user's line), however deep inside fearless the
    warning is raised (a compile under a launch, a tuner under a call)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and (_is_internal(frame) or _is_stdlib(frame)):
        frame, level = frame.f_back, level + 1
    return level


def _is_stdlib(frame) -> bool:
    filename = frame.f_code.co_filename
    return filename.startswith(_STDLIB) or filename.startswith("<frozen ")


def hide_internal_frames(exc: BaseException) -> None:
    """Remove fearless's frames from the traceback of ``exc`` when it is a user error.

    Call it in an ``except`` block and re-raise with a bare ``raise``::

        except FearlessError as exc:
            hide_internal_frames(exc)
            raise
    """
    if STATS.on and isinstance(exc, FearlessError):
        STATS.error(exc)
    if not isinstance(exc, FearlessError) or isinstance(exc, InternalError) \
            or CONFIG.full_traceback:
        return
    exc.__traceback__ = user_frames(exc.__traceback__)


def user_frames(tb):
    """Traceback ``tb`` relinked without fearless's frames (and the standard library's frames
    that fearless called); for any exception (the CLI shows a user's script failing with it)."""
    kept, inside = [], False
    while tb is not None:
        if _is_internal(tb.tb_frame):
            inside = True
        elif not (inside and _is_stdlib(tb.tb_frame)):  # the standard library called by
            kept.append(tb)                              # fearless (ast visitors) is internal
            inside = False                               # too; a user's callback is not
        tb = tb.tb_next
    trimmed = None
    for tb in reversed(kept):
        tb.tb_next = trimmed
        trimmed = tb
    return trimmed


def user_facing(fn: F) -> F:
    """Decorator for a public entry point: user errors leave it without fearless's frames.

    On a class it wraps ``__init__`` (a dataclass's generated one too: it validates in
    ``__post_init__``)."""
    if isinstance(fn, type):
        fn.__init__ = user_facing(fn.__init__)
        return fn

    @functools.wraps(fn)
    def boundary(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except FearlessError as exc:
            hide_internal_frames(exc)
            raise
    return cast(F, boundary)
