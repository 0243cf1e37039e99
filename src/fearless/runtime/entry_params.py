"""A compiled entry's parameter list, read from PTX text or from the driver, and compared with
the slots fearless will pack for it (``fl.foreign`` kernels, ``kernel/foreign.py``).

PTX (PTX ISA, "Kernel Function Parameters" and the ``.entry`` directive)::

    [.visible | .weak] .entry NAME [( PARAM {, PARAM} )] [performance directives] { body }
    PARAM := .param [.align N] .TYPE [.ptr [.global|.const|.local|.shared] [.align N]] PNAME
           | .param [.align N] .b8 PNAME[N]          (an aggregate passed by value)

``ptx_entry(kernel, ptx, name)`` finds the entry by a regular expression over the PTX text with
its comments removed, and reads each PARAM from its tokens: the type gives the size (``.u64``:
8 bytes; ``.b8 p[12]``: 12) and the kind: ``.u``/``.s`` an integer (or a pointer),
``.f`` a float, ``.b`` and aggregates untyped bits, which match either. NVRTC spells a C
``long long`` or pointer ``.u64``, a ``float`` ``.f32``, a ``bool`` ``.u8`` and ``__half``
``.align 2 .b8 p[2]``; LLVM's NVPTX back end writes ``.b32``/``.b64`` too.

The driver gives only each parameter's offset and size (``cuKernelGetParamInfo``, read at
load by ``runtime/module.py``'s ``param_layout``); those entries have the kind "bits".

``compare`` raises CompileError naming the kernel and the declared parameter whose slot
disagrees (size or kind), or the first one the entry lacks.
"""
from __future__ import annotations

import re
from typing import NamedTuple

from fearless.errors import CompileError

INT, FLOAT, BITS = "int", "float", "bits"
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_IDENT = r"[A-Za-z_$%][\w$]*"
_ENTRY = re.compile(rf"\.entry\s+({_IDENT})\s*(?:\(([^)]*)\))?")
_TYPE = re.compile(r"\.(b|s|u|f|bf)(8|16|32|64)")
_NAME = re.compile(rf"({_IDENT})(?:\[(\d+)\])?")
_STATE_SPACES = {".global", ".const", ".local", ".shared", ".ptr"}


class EntryParam(NamedTuple):
    """One parameter of a compiled entry: ``name`` (the PTX's, or ``#k`` from the driver),
    ``size`` in bytes, ``kind`` (INT, FLOAT or BITS), ``spelling`` for messages (``.u64``,
    ``.b8[2]``, ``8 bytes``) and its byte ``offset`` when the driver gave one."""

    name: str
    size: int
    kind: str
    spelling: str
    offset: int | None = None


class Expected(NamedTuple):
    """One slot fearless packs: the declared ``param`` it comes from, ``what`` it is (for
    messages: ``"x's pointer"``), ``size`` in bytes and ``kind`` (INT, FLOAT or BITS)."""

    param: str
    what: str
    size: int
    kind: str


def entry_names(ptx: str) -> list[str]:
    """The names of every ``.entry`` in ``ptx``, in order."""
    return [m.group(1) for m in _ENTRY.finditer(_COMMENT.sub(" ", ptx))]


def ptx_entry(kernel: str, ptx: str, name: str) -> list[EntryParam]:
    """The parameters of entry ``name`` in ``ptx``. Raises CompileError (naming ``kernel``)
    when there is no such entry or a parameter declaration is outside the grammar above."""
    text = _COMMENT.sub(" ", ptx)
    match = next((m for m in _ENTRY.finditer(text) if m.group(1) == name), None)
    if match is None:
        found = entry_names(ptx)
        raise CompileError(f"the PTX has no entry '{name}' (its entries: "
                           f"{', '.join(found) or 'none'})", kernel=kernel,
                           help='declare the CUDA function extern "C", so that its name is '
                                'not mangled, and pass that name')
    body = match.group(2) or ""
    return [_param(kernel, decl.strip()) for decl in body.split(",") if decl.strip()]


def _param(kernel: str, decl: str) -> EntryParam:
    tokens = decl.split()
    if not tokens or tokens[0] != ".param" or len(tokens) < 3:
        raise _unreadable(kernel, decl)
    kind = size = spelling = None
    k = 1
    while k < len(tokens) - 1:
        token = tokens[k]
        typ = _TYPE.fullmatch(token)
        if token == ".align" and k + 1 < len(tokens) - 1 and tokens[k + 1].isdigit():
            k += 1
        elif typ and kind is None:
            letter, bits = typ.groups()
            kind = {"b": BITS, "s": INT, "u": INT}.get(letter, FLOAT)
            size, spelling = int(bits) // 8, token
        elif token not in _STATE_SPACES:
            raise _unreadable(kernel, decl)
        k += 1
    name = _NAME.fullmatch(tokens[-1])
    if kind is None or name is None:
        raise _unreadable(kernel, decl)
    if name.group(2) is not None:  # an aggregate: its bytes, untyped
        count = int(name.group(2))
        return EntryParam(name.group(1), size * count, BITS, f"{spelling}[{count}]")
    return EntryParam(name.group(1), size, kind, spelling)


def _unreadable(kernel: str, decl: str) -> CompileError:
    return CompileError(f"cannot read the PTX parameter declaration `{decl}`", kernel=kernel,
                        help="a parameter reads `.param [.align N] .TYPE NAME` or "
                             "`.param .align N .b8 NAME[SIZE]` (PTX ISA, kernel parameters)")


def _describe(size: int, kind: str) -> str:
    what = {INT: "integer or pointer", FLOAT: "float", BITS: "value"}[kind]
    article = "an" if str(size).startswith("8") or size in (11, 18) else "a"
    return f"{article} {size}-byte {what}"


def compare(kernel: str, found: list[EntryParam], expected: list[Expected], where: str,
            signature: str) -> None:
    """Refuse (CompileError) an entry whose parameters ``found`` (read from ``where``: "the
    PTX entry", "the cubin's entry") differ from the slots ``expected`` in count, size or kind
    (an INT and a FLOAT differ; BITS matches either). ``signature``: the C prototype that
    would match, for the help line."""
    help = f"the entry must read {signature}"
    for k, (f, e) in enumerate(zip(found, expected)):
        if f.size != e.size or (BITS not in (f.kind, e.kind) and f.kind != e.kind):
            raise CompileError(f"{where}'s parameter {k} ({f.name}, {f.spelling}) is "
                               f"{_describe(f.size, f.kind)}, but fearless passes {e.what} "
                               f"there, {_describe(e.size, e.kind)}", kernel=kernel,
                               param=e.param, help=help)
    if len(found) < len(expected):
        e = expected[len(found)]
        raise CompileError(f"{where} takes {len(found)} parameters, but the declared "
                           f"parameters pass {len(expected)}: nothing takes {e.what} (slot "
                           f"{len(found)})", kernel=kernel, param=e.param, help=help)
    if len(found) > len(expected):
        f = found[len(expected)]
        raise CompileError(f"{where} takes {len(found)} parameters, but the declared "
                           f"parameters pass {len(expected)}: nothing is passed for its "
                           f"parameter {len(expected)} ({f.name})", kernel=kernel, help=help)
