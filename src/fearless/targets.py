"""What the command line names: kernels (``FILE:kernel`` or ``module:kernel``), signatures,
constants, blocks and size expressions, parsed once for every subcommand that takes them
(``fearless inspect``, ``export``, ``bench``; ``cli.py``, ``bench.py``).

    --signature x=f32,out=f32:2          dtype and rank of generic parameters
    --signature c=f32:2/64x64            an Out's tile shape (tile kernels)
    --signature x=f32[n],a=[m,k]         a shape, for ``fearless bench``: extents are
                                         expressions of the --size names; the rank follows
    --const bk=64                        a tile kernel's ft.Const values

A signature's item is ``name=[dtype][:ndim][[extents]][/tile]``: the dtype may be left out when
a shape is given (the annotation's is used). Every mistake raises ``UsageError`` (one line,
exit status 2); an exception of the user's module while it loads becomes ``ScriptError``.
"""
from __future__ import annotations

import ast
import importlib
import importlib.util
import math
import operator
import re
import sys
from contextlib import contextmanager
from pathlib import Path

from fearless import dtypes
from fearless.errors import FearlessError

SIGNATURE_FORM = ("name=dtype[:ndim][[extents]][/tile], e.g. x=f32, out=f32:2, z=f16:2/64x64 "
                  "or a=f16[m,k]")
_ITEM = re.compile(r"(?P<dtype>[^:\[/]*)(?::(?P<ndim>[^\[/]*))?(?:\[(?P<dims>[^\]]*)\])?"
                   r"(?:/(?P<tile>.*))?")


class UsageError(Exception):
    """A mistake on the command line: printed as one line, exit status 2."""


class ScriptError(Exception):
    """The user's script raised while it was loaded or run (its exception is the cause)."""


def script_path(spec: str) -> Path:
    """The existing file ``spec`` names, resolved. Raises UsageError."""
    path = Path(spec).resolve()
    if not path.is_file():
        raise UsageError(f"{spec}: no such file" if not path.exists() else
                         f"{spec} is not a file")
    return path


@contextmanager
def user_code(what: str):
    """Around running the user's code: an exception from it (not fearless's, not the command
    line's) becomes a ScriptError ``"{what} raised ..."``, whose cause main() prints."""
    try:
        yield
    except (FearlessError, UsageError):
        raise
    except Exception as exc:
        raise ScriptError(f"{what} raised {type(exc).__name__}") from exc


def load_module(spec: str):
    """The module ``spec`` names: a file path (executed as its stem's module) or a dotted
    module name (imported from the current directory or sys.path)."""
    if spec.endswith(".py") or "/" in spec:
        path = script_path(spec)
        sys.path.insert(0, str(path.parent))
        mod_spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(mod_spec)
        sys.modules[path.stem] = module
        with user_code(f"loading {spec}"):
            mod_spec.loader.exec_module(module)
        return module
    sys.path.insert(0, str(Path.cwd()))  # like `python -c "import spec"` run here
    with user_code(f"importing {spec}"):
        try:
            return importlib.import_module(spec)
        except ModuleNotFoundError as exc:
            if exc.name == spec.split(".")[0] or spec.startswith(f"{exc.name}."):
                raise UsageError(f"cannot import {spec!r} ({exc}); give module:function of an "
                                 f"importable module, or path/to/file.py:function") from None
            raise  # a module the user's code imports is missing: its error


def find_kernels(target: str, autotuned: bool = False) -> list:
    """The kernels ``target`` names: ``FILE:kernel`` / ``module:kernel`` (one), or ``FILE``
    (each SIMT and tile kernel it defines; with ``autotuned``, each ``ft.autotune`` one).
    Raises UsageError naming what is there."""
    from fearless.kernel import Kernel
    from fearless.kernel.tile import TileKernel
    from fearless.tile.tuning import Autotuned
    kinds, what, noun = ((Autotuned,), "ft.autotune kernel", "ft.autotune kernel") \
        if autotuned else ((Kernel, TileKernel), "@fearless.kernel or tile kernel", "kernel")
    module_spec, _, name = target.rpartition(":") if ":" in target else (target, "", "")
    module = load_module(module_spec)
    found = {n: v for n, v in vars(module).items() if isinstance(v, kinds)}
    listing = f"its {noun}s: {', '.join(found)}" if found else f"it defines no {noun}"
    fix = "; wrap it in @ft.autotune(configs=[ft.Config(...), ...]) (or with no configs, " \
          "the default space)" if autotuned else ""
    if name:
        k = getattr(module, name, None)
        if k is None:
            raise UsageError(f"{module_spec} has no '{name}'; {listing}")
        if not isinstance(k, kinds):
            article = "an" if autotuned else "a"
            raise UsageError(f"'{name}' in {module_spec} is a {type(k).__name__}, not {article} "
                             f"{what}; {listing}{fix}")
        return [k]
    if not found:
        raise UsageError(f"no {what} in {module_spec}{fix}")
    return list(found.values())


def parse_signature(text: str, shapes: dict | None = None) -> dict:
    """``x=f32,out=f32:2/64x64`` -> {name: (dtype or None, ndim or None, tile shape or
    None)}; a bracketed shape ``x=f32[n+1, m]`` gives the rank and, when ``shapes`` is a dict,
    is stored there as its extents' expression texts (``{"x": ("n+1", "m")}``). Raises
    UsageError."""
    out = {}
    for item in filter(None, (s.strip() for s in re.split(r",(?![^\[]*\])", text))):
        name, eq, spec = (s.strip() for s in item.partition("="))
        m = _ITEM.fullmatch(spec)
        if not eq or not name.isidentifier() or not spec or m is None or \
                (not m["dtype"].strip() and m["dims"] is None):
            raise UsageError(f"--signature {item!r}: expected {SIGNATURE_FORM}")
        dtype, ndim, dims, tile = (m["dtype"].strip(), (m["ndim"] or "").strip(), m["dims"],
                                   m["tile"] or "")
        dt = None
        if dtype:
            try:
                dt = dtypes.coerce(dtype)
            except TypeError:
                raise UsageError(f"--signature {item!r}: {dtype!r} is not a dtype; one of "
                                 f"{', '.join(d.name for d in dtypes.ALL)}") from None
        if ndim and not (ndim.isdigit() and int(ndim) > 0):
            raise UsageError(f"--signature {item!r}: the rank {ndim!r} is not a positive "
                             f"integer")
        extents = tile.split("x") if tile else []
        if not all(n.strip().isdigit() and int(n) > 0 for n in extents):
            raise UsageError(f"--signature {item!r}: the tile shape {tile!r} is not positive "
                             f"extents joined by x, such as 64x64")
        rank = int(ndim) if ndim else None
        if dims is not None:
            exprs = tuple(d.strip() for d in dims.split(","))
            if not all(exprs):
                raise UsageError(f"--signature {item!r}: the shape [{dims}] has an empty "
                                 f"extent; give extents joined by commas, such as [m,k]")
            if rank is not None and rank != len(exprs):
                raise UsageError(f"--signature {item!r}: the rank {rank} disagrees with the "
                                 f"shape [{dims}]")
            rank = len(exprs)
            if shapes is not None:
                shapes[name] = exprs
        out[name] = (dt, rank, tuple(int(n) for n in extents) if extents else None)
    return out


def parse_consts(text: str, option: str = "--const") -> dict:
    """``bk=64,alpha=0.5`` -> {name: int or float}. Raises UsageError naming ``option``."""
    out = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, eq, value = (s.strip() for s in item.partition("="))
        if not eq or not name.isidentifier():
            raise UsageError(f"{option} {item!r}: expected name=value, e.g. "
                             f"{'bk=64' if option == '--const' else 'n=3'}")
        try:
            out[name] = int(value)
        except ValueError:
            try:
                out[name] = float(value)
            except ValueError:
                raise UsageError(f"{option} {item!r}: {value!r} is not a number") from None
    return out


def parse_shapes(text: str) -> dict:
    """``a=4096x4096,n=8`` -> {name: shape tuple}. Raises UsageError."""
    out = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, eq, spec = (s.strip() for s in item.partition("="))
        extents = spec.lower().split("x")
        if not eq or not name.isidentifier() or not all(
                e.strip().isdigit() and int(e) > 0 for e in extents):
            raise UsageError(f"--shape {item!r}: expected name=extents joined by x, such as "
                             f"a=4096x4096")
        out[name] = tuple(int(e) for e in extents)
    return out


def parse_sizes(items: list[str]) -> dict:
    """``["m=4096,n=2**10", "k=m//2"]`` -> {"m": 4096, "n": 1024, "k": 2048}: each value an
    expression of the names before it. Raises UsageError."""
    bound: dict = {}
    for text in items:
        for item in filter(None, (s.strip() for s in text.split(","))):
            name, eq, expr = (s.strip() for s in item.partition("="))
            if not eq or not name.isidentifier() or not expr:
                raise UsageError(f"--size {item!r}: expected name=value, e.g. n=4096")
            bound[name] = evaluate(expr, bound, f"--size {name}=")
    return bound


def parse_block(text: str | None) -> tuple | None:
    """``256`` or ``32x8`` (x first) -> a tuple of positive extents; None stays None."""
    if text is None:
        return None
    parts = text.lower().split("x")
    if not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise UsageError(f"--block {text!r}: expected positive extents joined by x, such as "
                         f"256 or 32x8")
    return tuple(int(p) for p in parts)


def names(kernel, constants: bool) -> list[str]:
    """The names of ``kernel``'s runtime parameters, or of its compile-time constants."""
    from fearless.kernel.params import CONST
    return [p.name for p in kernel.params if (p.kind is CONST) == constants]


def check_names(kernels, given: dict, option: str, constants: bool) -> None:
    """Refuse a name in ``given`` that is a parameter (constant) of none of ``kernels``."""
    known = list(dict.fromkeys(n for k in kernels for n in names(k, constants)))
    unknown = [n for n in given if n not in known]
    if unknown:
        which = ", ".join(f"'{k.name}'" for k in kernels)
        raise UsageError(f"{option} names '{unknown[0]}', which is not a "
                         f"{'constant' if constants else 'parameter'} of {which} "
                         f"(those are: {', '.join(known) or 'none'})")


def param_types(kernel, signature: dict) -> tuple:
    """The IR types of ``kernel``'s runtime parameters (SIMT or tile) that a call with
    arguments as ``signature`` describes them would specialise to (``kernel/params.py``):
    ``signature`` maps a name to (dtype, ndim or None, tile shape or None), the annotations fill
    the gaps. Raises UsageError for a generic parameter left open, ArgumentTypeError or
    ContractError for a signature the kernel refuses (as a call would)."""
    from fearless.kernel import params as P
    runtime = kernel.runtime_params
    try:
        infos = P.signature_infos(runtime, signature)
    except P.Unspecified as exc:
        raise UsageError(str(exc)) from None
    return P.specialise(kernel.name, runtime, infos)


# size expressions ---------------------------------------------------------------------------

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
           ast.Pow: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
MAX_EXPONENT = 64   # 2**64 is as far as a size, byte or flop count needs to go
MAX_BITS = 128      # nor does any value along the way: bigger ones are refused at once


def evaluate(text: str, bound: dict, what: str):
    """The value of the arithmetic expression ``text`` over the numbers in ``bound`` (name ->
    int or float): numbers, names, ``+ - * / // % **`` and parentheses, nothing else (parsed
    with ``ast`` and walked here: no ``eval``, no attribute, call or subscript; an exponent
    above ``MAX_EXPONENT``, a value past ``MAX_BITS`` bits or not a finite real number is
    refused, so no expression runs long). ``what`` names the option in messages. Raises
    UsageError."""
    def fail(why: str):
        raise UsageError(f"{what} {text!r}: {why}")

    if len(text) > 1000:
        fail("longer than 1000 characters")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, RecursionError, MemoryError, ValueError):
        fail("not an arithmetic expression (numbers, --size names, + - * / // % ** and "
             "parentheses)")

    def checked(value):
        if isinstance(value, complex) or (isinstance(value, float) and not math.isfinite(value)):
            fail(f"the value {value} is not a finite real number")
        if isinstance(value, int) and abs(value).bit_length() > MAX_BITS:
            fail(f"a value along the way has more than {MAX_BITS} bits")
        return value

    def walk(node):
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in bound:
                fail(f"'{node.id}' is not bound; give --size {node.id}=... (bound: "
                     f"{', '.join(bound) or 'none'})")
            return bound[node.id]
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return checked(_UNARY[type(node.op)](walk(node.operand)))
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = walk(node.left), walk(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
                fail(f"the exponent {right} is above {MAX_EXPONENT}")
            try:
                return checked(_BINARY[type(node.op)](left, right))
            except ZeroDivisionError:
                fail("divides by zero")
            except OverflowError:
                fail("a value along the way is too large")
        fail(f"{ast.unparse(node)!r} is not allowed: only numbers, --size names, "
             f"+ - * / // % ** and parentheses")

    try:
        return walk(tree)
    except RecursionError:
        fail("nested too deeply")
