"""The on-disk JIT cache: compiled kernels keyed by everything that can change the machine code.

Keys are SHA-256 digests of the kernel's source, the source of every device function it calls,
its compile-time constants, the argument specialisation, the backend and target arch, the options
and the versions of fearless (its sources' digest), LLVM and nvJitLink. An entry is one file,
``root/v2/<key[:2]>/<key>.entry``:

    b"fearless cache entry 2\\n"   the format line
    32 bytes                       SHA-256 of everything after it
    a JSON line                    [[section name, byte length], ...]
    the sections' bytes            e.g. "ptx", "cubin", "pickle" (IR and facts, see ``dumps``)

A writer builds the whole file under a temporary name in the same folder and renames it into
place, so a reader sees no entry or a whole one, and processes racing to write one key leave one
whole entry (the last rename wins; they are equal). An entry that is short, altered or does not
decode is deleted with one ``CacheWarning`` and the kernel is compiled again: damaged code is
never run. A folder that cannot be written costs a recompile in each process and one warning.

Source positions in an entry (the spans that errors print, and their chains of device-function
calls) are stored relative to the ``def`` line of the function they point into, with no file name,
and rebased on load onto where the kernel's functions are now (``Anchor``): the key covers a
kernel's text, not where it sits in its file.

The cache directory is trusted like Python's own ``__pycache__``: ``loads`` accepts only fearless
classes and NumPy scalars, which keeps a damaged pickle from calling anything else, but it is not
a defence against someone who can write the user's files.
"""
from __future__ import annotations

import functools
import hashlib
import io
import json
import linecache
import os
import pickle
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

from fearless.errors import CacheWarning
from fearless.frontend.spans import CallSite, Span
from fearless.tracebacks import user_stacklevel

FORMAT = "v2"
MAGIC = b"fearless cache entry 2\n"
_DIGEST = 32  # bytes of SHA-256


@functools.lru_cache(maxsize=1)
def compiler_fingerprint() -> str:
    """A digest of fearless's own Python sources, part of every disk-cache key: a changed
    compiler (a new pass, a fixed proof) never reuses what an older one cached under the same
    version number. Read once per process (a few milliseconds)."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def digest(parts) -> str:
    h = hashlib.sha256()
    for part in parts:
        data = part if isinstance(part, bytes) else str(part).encode()
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


class DiskCache:
    """``get(key)`` / ``put(key, sections)`` of byte sections under ``root/v2``; disabled ->
    no-ops. Damage found by ``get`` (or reported through ``discard``) deletes the entry and
    warns once (``CacheWarning``)."""

    def __init__(self, root: Path, enabled: bool = True):
        self.root = Path(root) / FORMAT
        self.enabled = enabled

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.entry"

    def get(self, key: str) -> dict[str, bytes] | None:
        """The entry's sections by name, or None on a miss or a damaged entry."""
        if not self.enabled:
            return None
        try:
            data = self.path(key).read_bytes()
        except OSError:
            return None  # missing (or unreadable: then not ours to delete)
        sections, damage = _parse(data)
        if damage is not None:
            self.discard(key, damage)
        return sections

    def load(self, key: str, decode):
        """``decode(sections)`` of the entry, or None on a miss; an entry that fails to decode
        is damaged (discarded, warned about), whatever the exception."""
        sections = self.get(key)
        if sections is None:
            return None
        try:
            return decode(sections)
        except Exception as exc:  # noqa: BLE001 (any failure means the entry is unusable)
            self.discard(key, f"it does not decode ({type(exc).__name__}: {exc})")
            return None

    def put(self, key: str, sections: dict[str, bytes]) -> None:
        """Write the entry atomically; a folder that cannot be written warns once per process
        and only costs recompiles."""
        if not self.enabled:
            return
        header = json.dumps([[name, len(data)] for name, data in sections.items()]).encode()
        body = b"".join([header, b"\n", *sections.values()])
        path = self.path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(MAGIC + hashlib.sha256(body).digest() + body)
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as exc:
            _warn_unwritable(str(self.root.parent), exc)

    def discard(self, key: str, reason: str) -> None:
        """Delete a damaged entry, saying so once."""
        path = self.path(key)
        # not tracebacks.warn_user: inside a tuning that would keep it for the winning config
        warnings.warn(f"fearless: the JIT cache entry {path} is damaged: {reason}; it is "
                      f"discarded and the kernel compiled again", CacheWarning,
                      stacklevel=user_stacklevel())
        try:
            path.unlink()
        except OSError:
            pass  # gone already, or a read-only folder: the warning said what happened


def _parse(data: bytes):
    """``(sections, None)`` for a whole entry, ``(None, reason)`` for a damaged one."""
    if not data:
        return None, "it is empty"
    if not data.startswith(MAGIC):
        return None, "it does not start with the entry format line"
    start = len(MAGIC) + _DIGEST
    body = data[start:]
    if len(data) < start or hashlib.sha256(body).digest() != data[len(MAGIC):start]:
        return None, "its contents do not match its digest (truncated or altered)"
    head, _, rest = body.partition(b"\n")
    try:
        layout = [(str(name), int(size)) for name, size in json.loads(head)]
    except (ValueError, TypeError):
        return None, "its section table does not parse"
    if sum(size for _, size in layout) != len(rest) or any(size < 0 for _, size in layout):
        return None, "its section table does not match its length"
    sections, at = {}, 0
    for name, size in layout:
        sections[name], at = rest[at:at + size], at + size
    return sections, None


_UNWRITABLE: set[str] = set()


def _warn_unwritable(root: str, exc: OSError) -> None:
    if root in _UNWRITABLE:
        return
    _UNWRITABLE.add(root)
    warnings.warn(f"fearless: cannot write the JIT cache in {root} ({exc}); compiled kernels "
                  f"are not kept between processes. Set FEARLESS_CACHE_DIR to a writable "
                  f"folder, or FEARLESS_CACHE=0", CacheWarning, stacklevel=user_stacklevel())


# source positions -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Anchor:
    """Where one function of a kernel (the kernel or a device function it calls) is now:
    ``first``..``last`` its lines, decorators included; ``line`` its ``def`` line; ``indent``
    the columns its source was dedented by."""

    filename: str
    first: int
    last: int
    line: int
    indent: int


class Unplaceable(pickle.PicklingError):
    """A span outside every anchor: it could not be rebased, so the entry is not written."""


def _anchor_of(filename: str, line: int, anchors) -> int:
    for k, a in enumerate(anchors):
        if a.filename == filename and a.first <= line <= a.last:
            return k
    raise Unplaceable(f"{filename}:{line} is outside the kernel's functions")


def _relative(span: Span, anchors) -> tuple:
    """``(anchor, line, col, end_col, chain)`` relative to the anchor; the call chain's
    ``file:line`` strings likewise as ``(anchor, line)``."""
    k = _anchor_of(span.filename, span.line, anchors)
    a = anchors[k]
    chain = tuple((c.function, _relative_line(c.defined, anchors), c.caller,
                   _relative_line(c.at, anchors)) for c in span.inlined)
    return k, span.line - a.line, span.col - a.indent, span.end_col - a.indent, chain


def _relative_line(where: str, anchors) -> tuple:
    filename, _, line = where.rpartition(":")
    k = _anchor_of(filename, int(line), anchors)
    return k, int(line) - anchors[k].line


def _rebased(k: int, line: int, col: int, end_col: int, chain: tuple, anchors) -> Span:
    a = anchors[k]
    line += a.line
    text = linecache.getline(a.filename, line).rstrip("\n")
    inlined = tuple(CallSite(function, _rebased_line(*defined, anchors), caller,
                             _rebased_line(*at, anchors))
                    for function, defined, caller, at in chain)
    return Span(a.filename, line, col + a.indent, end_col + a.indent, text, inlined)


def _rebased_line(k: int, line: int, anchors) -> str:
    return f"{anchors[k].filename}:{anchors[k].line + line}"


class _Pickler(pickle.Pickler):
    def __init__(self, file, anchors):
        super().__init__(file, protocol=5)
        self.anchors = anchors

    def persistent_id(self, obj):
        if type(obj) is Span:
            return ("span", *_relative(obj, self.anchors))
        return None


# what an entry may name: the IR's and its facts' classes, dtypes by name, NumPy scalars
_NUMPY = {("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
          ("numpy._core.multiarray", "scalar")}


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, anchors):
        super().__init__(file)
        self.anchors = anchors

    def persistent_load(self, pid):
        kind, *where = pid
        if kind != "span":
            raise pickle.UnpicklingError(f"unknown persistent id {kind!r}")
        return _rebased(*where, self.anchors)

    def find_class(self, module: str, name: str):
        if (module, name) in _NUMPY or module == "ml_dtypes":
            return super().find_class(module, name)
        if module.startswith("fearless."):
            obj = super().find_class(module, name)
            if isinstance(obj, type) or (module, name) == ("fearless.dtypes", "from_name"):
                return obj
        raise pickle.UnpicklingError(f"a cache entry may not name {module}.{name}")


def dumps(obj, anchors) -> bytes:
    """Pickle ``obj`` (IR, compile facts) with every Span made relative to ``anchors``.
    Raises ``Unplaceable`` for a span outside them."""
    f = io.BytesIO()
    _Pickler(f, anchors).dump(obj)
    return f.getvalue()


def loads(data: bytes, anchors):
    """The inverse of ``dumps``, with spans rebased onto ``anchors`` (the kernel as it is now)."""
    return _Unpickler(io.BytesIO(data), anchors).load()
