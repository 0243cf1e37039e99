"""Launch contracts: what a kernel declares about every launch of it, checked on the host.

    @fl.kernel(contract=fl.Contract(dims=1, block=256, dynamic_shared=(0, 64 * 1024),
                                    min_compute_capability=(8, 0),
                                    requires=("len(x) >= n", lambda a, m, k: len(a) >= m * k)))

``dims``: 1, 2 or 3, the index space and launch rank. ``block``: the exact block (an int or one
int per axis, x first), also written into the PTX as ``.reqntid`` so the driver refuses any other
block even on a raw launch; or ``max_threads``: a bound on the block's threads (``.maxntid``).
``dynamic_shared``: bytes of dynamic shared memory per block, exact or a ``(lo, hi)`` range (a
maximum above 48 KB opts the kernel in to the device's larger limit when it is loaded).
``min_compute_capability``: ``(major, minor)``. ``requires``: size relations between parameters,
one comparison each (``== != < <= > >=``) over parameter names, ``len(array)``, integer literals,
``+ - * //`` and parentheses, as a string or a lambda over parameter names; checked at every
launch, a failure is a ContractError that shows the relation and both sides' values. Tile
kernels take the same relations as ``@ft.kernel(requires=...)`` (``requirements``,
``check_names``).

Checked when the kernel is decorated (``ContractError``): the fields' shapes and ranges, a block
within ``max_threads`` and 1024 threads, and that ``requires`` names only parameters. Following
cuda-oxide's ``#[launch_contract]`` (``reference/cuda-oxide.md``, section 2).
"""
from __future__ import annotations

import ast
import inspect
import linecache
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass, field

from fearless.errors import ContractError
from fearless.tracebacks import user_facing

MAX_THREADS = 1024
_CMP = {ast.Eq: ("==", operator.eq), ast.NotEq: ("!=", operator.ne), ast.Lt: ("<", operator.lt),
        ast.LtE: ("<=", operator.le), ast.Gt: (">", operator.gt), ast.GtE: (">=", operator.ge)}
_ARITH = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
          ast.FloorDiv: operator.floordiv}


@dataclass(frozen=True)
class Requirement:
    """One ``requires`` relation: its text, its comparison (an ``ast.Compare``), and the lambda
    it came from (None for a string)."""

    text: str
    tree: ast.Compare
    fn: object = None

    def names(self) -> set[str]:
        return {n.id for n in ast.walk(self.tree) if isinstance(n, ast.Name) and n.id != "len"}

    def check(self, kernel: str, env: dict, what: str = "the contract's requirement",
              fix: str = "change the kernel's contract") -> None:
        """Raise ContractError unless the relation holds for the launch's arguments ``env``
        (parameter name -> array, tensor, partition or number); the message calls the relation
        ``what``, and its help line ends with ``fix``."""
        lhs, rhs = (_evaluate(kernel, self.text, node, env)
                    for node in (self.tree.left, self.tree.comparators[0]))
        symbol, compare = _CMP[type(self.tree.ops[0])]
        if not compare(lhs, rhs):
            raise ContractError(f"the launch breaks {what} `{self.text}`: "
                                f"{ast.unparse(self.tree.left)} = {lhs}, "
                                f"{ast.unparse(self.tree.comparators[0])} = {rhs}, and "
                                f"{lhs} {symbol} {rhs} is false", kernel=kernel,
                                help=f"pass arguments whose sizes satisfy the requirement, or "
                                     f"{fix}")


def _evaluate(kernel: str, text: str, node, env: dict) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) \
            and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        value = env[node.id]
        if hasattr(value, "shape"):
            raise ContractError(f"`{text}` uses the array '{node.id}' as a number",
                                kernel=kernel, help=f"write len({node.id})")
        return int(value)
    if isinstance(node, ast.Call):
        value = env[node.args[0].id]
        if not hasattr(value, "shape"):
            raise ContractError(f"`{text}` takes len() of the scalar '{node.args[0].id}'",
                                kernel=kernel)
        return int(value.shape[0]) if value.shape else 1
    if isinstance(node, ast.UnaryOp):
        return -_evaluate(kernel, text, node.operand, env)
    return _ARITH[type(node.op)](_evaluate(kernel, text, node.left, env),
                                 _evaluate(kernel, text, node.right, env))


def _grammar(text: str, node) -> None:
    """Refuse anything but the relation grammar of the module docstring."""
    ok = (isinstance(node, ast.Constant) and isinstance(node.value, int)
          and not isinstance(node.value, bool)) or isinstance(node, ast.Name)
    if isinstance(node, ast.Call):
        ok = (isinstance(node.func, ast.Name) and node.func.id == "len" and not node.keywords
              and len(node.args) == 1 and isinstance(node.args[0], ast.Name))
    elif isinstance(node, ast.UnaryOp):
        ok = isinstance(node.op, ast.USub)
        _grammar(text, node.operand)
    elif isinstance(node, ast.BinOp):
        ok = type(node.op) in _ARITH
        _grammar(text, node.left)
        _grammar(text, node.right)
    if not ok:
        raise ContractError(f"requires `{text}`: `{ast.unparse(node)}` is not allowed",
                            help="a requirement compares parameter names, len(array), integer "
                                 "literals, + - * // and parentheses, e.g. len(a) >= m * k")


def _parse(text: str, tree=None) -> ast.Compare:
    if tree is None:
        try:
            tree = ast.parse(text.strip(), mode="eval").body
        except SyntaxError:
            raise ContractError(f"requires `{text}` is not a Python expression") from None
    if not (isinstance(tree, ast.Compare) and len(tree.ops) == 1):
        raise ContractError(f"requires `{text}` must be one comparison, such as len(a) >= n")
    _grammar(text, tree.left)
    _grammar(text, tree.comparators[0])
    return tree


def _lambda_body(fn):
    """The comparison inside a lambda's source (found by line and argument names), or None."""
    code = fn.__code__
    try:
        module = ast.parse("".join(linecache.getlines(code.co_filename)))
    except SyntaxError:
        return None
    args = list(code.co_varnames[:code.co_argcount])
    for node in ast.walk(module):
        if isinstance(node, ast.Lambda) and node.lineno == code.co_firstlineno \
                and [a.arg for a in node.args.args] == args:
            return node.body
    return None


def requirements(value) -> tuple[Requirement, ...]:
    """A ``requires=`` value (one string or lambda, or a tuple of them) as Requirements.
    Raises ContractError for a relation outside the grammar of the module docstring."""
    items = value if isinstance(value, tuple) else (value,)
    return tuple(r if isinstance(r, Requirement) else requirement(r) for r in items)


def check_names(kernel: str, requirements: tuple, params: list[str]) -> None:
    """Refuse (ContractError) requirements that name something other than ``kernel``'s
    parameters ``params``."""
    for r in requirements:
        unknown = sorted(r.names() - set(params))
        if unknown:
            raise ContractError(f"requires `{r.text}` names {', '.join(unknown)}, which "
                                f"{'is' if len(unknown) == 1 else 'are'} not a parameter",
                                kernel=kernel, help=f"the parameters are {', '.join(params)}")


def requirement(item) -> Requirement:
    if isinstance(item, str):
        return Requirement(item.strip(), _parse(item))
    if callable(item) and getattr(item, "__name__", "") == "<lambda>":
        body = _lambda_body(item)
        if body is None:
            raise ContractError("requires: the source of this lambda cannot be read",
                                help="write the relation as a string, e.g. \"len(a) >= n\"")
        text = ast.unparse(body)
        tree = _parse(text, body)
        if set(inspect.signature(item).parameters) != Requirement(text, tree).names():
            raise ContractError(f"requires `{text}`: the lambda's parameters must be exactly "
                                f"the names it uses")
        return Requirement(text, tree, item)
    raise ContractError(f"requires takes strings or lambdas, got {item!r}")


def _ints(what: str, value, count: int | None = None) -> tuple:
    items = value if isinstance(value, tuple) else (value,)
    if not items or (count is not None and len(items) != count) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in items):
        want = f"{count} ints" if count else "an int or a tuple of ints"
        raise ContractError(f"Contract {what} must be {want}, got {value!r}")
    return items


@user_facing
@dataclass(frozen=True)
class Contract:
    """A kernel's launch contract; see the module docstring."""

    dims: int
    block: tuple | int | None = None
    max_threads: int | None = None
    dynamic_shared: int | tuple = 0
    min_compute_capability: tuple = (0, 0)
    requires: tuple | str | Callable[..., bool] = field(default=())  # one, or a tuple

    def __post_init__(self):
        if self.dims not in (1, 2, 3) or isinstance(self.dims, bool):
            raise ContractError(f"Contract dims must be 1, 2 or 3, got {self.dims!r}")
        if self.block is None and self.max_threads is None:
            raise ContractError("a Contract needs block=(...) (exact) or max_threads=N",
                                help="for example fl.Contract(dims=1, block=256)")
        if self.block is not None:
            block = _ints("block", self.block, None)
            if len(block) != self.dims or min(block) <= 0:
                raise ContractError(f"Contract block {self.block!r} must be {self.dims} "
                                    f"positive ints (x first) for dims={self.dims}")
            object.__setattr__(self, "block", block)
            limit = self.max_threads or MAX_THREADS
            if math.prod(block) > limit:
                raise ContractError(f"Contract block {block} has {math.prod(block)} threads, "
                                    f"above {'max_threads' if self.max_threads else 'the'} "
                                    f"limit {limit}")
        if self.max_threads is not None:
            (n,) = _ints("max_threads", self.max_threads, 1)
            if not 0 < n <= MAX_THREADS:
                raise ContractError(f"Contract max_threads must be 1 .. {MAX_THREADS}, got {n}")
        lo, hi = self.shared_range
        if lo < 0 or lo > hi:
            raise ContractError(f"Contract dynamic_shared {self.dynamic_shared!r} must be bytes "
                                f">= 0, or a (lo, hi) range with lo <= hi")
        _ints("min_compute_capability", self.min_compute_capability, 2)
        object.__setattr__(self, "requires", requirements(self.requires))

    @property
    def shared_range(self) -> tuple[int, int]:
        """(lo, hi) bytes of dynamic shared memory; lo == hi for an exact amount."""
        if isinstance(self.dynamic_shared, tuple):
            return _ints("dynamic_shared", self.dynamic_shared, 2)
        (n,) = _ints("dynamic_shared", self.dynamic_shared, 1)
        return n, n

    def bind(self, kernel: str, params: list[str]) -> None:
        """Refuse requirements that name something other than ``kernel``'s parameters."""
        check_names(kernel, self.requires, params)

    def key(self) -> str:
        """What of the contract the compiled code depends on (the disk-cache key)."""
        return f"block={self.block} max_threads={self.max_threads}"
