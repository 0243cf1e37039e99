"""The op registry: every IR op is defined once here, by an OpDef, and read by all backends.

An OpDef names the op, says how many operands, results and regions it has, whether it ends
control flow (``terminator``), whether it has side effects, which kernels use it (``track``),
whether it is a read the bounds pass checks (``checked_read``), whether every lane of a warp
must reach it together (``warp_collective``), what a math function's operands are
(``operand_kinds``), the functions users call for it
(``user_names``), the rule that gives its result types (``result``: ``Builder.create`` applies
it, the verifier checks it), a verifier that checks operand types and attributes, and, for the
scalar ops, the reference semantics ``eval`` (see ``Eval``): the CPU backend runs it on arrays,
the frontend folds literals and ``analysis/owners.py`` enumerates indices with it. Backends
keep one rule per op name in their own ``RULES`` table and derive the ops they refuse from
``track`` (``only``); a test checks that every backend covers every op in ``REGISTRY``.

``Op`` names every op, once: passes and backends compare and key their tables by its members,
never by string literals (tests/ir/test_opdef.py scans src/ for them). An ``Op`` is a ``str``
(``Op.ADD == "arith.add"``), so the IR text and the bytecode do not depend on it.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Callable

from fearless.ir.core import Operation

Verifier = Callable[[Operation], "str | None"]
# the result types of an op from its operand types and attributes
ResultRule = Callable[[list, dict], list]
# What an op computes, ``eval(dtype, attrs, *operands)``: the definition docs/semantics.md states
# and every backend is held to. ``dtype`` is the result's DType and the operands are NumPy arrays
# or scalars of the operand types (the CPU backend's lanes and tiles, any shape, 0-d too): integers
# wrap around, ``//`` and ``%`` floor, a zero divisor gives 0. With ``dtype`` None the operands are
# Python numbers (bool, int of any size, float as f64): the frontend's weak literals and the proofs'
# exact indices; integers do not wrap, and where Python has no number (``1 // 0``, ``1 << -1``) it
# raises ZeroDivisionError or ValueError and the caller leaves the value to run time.
Eval = Callable[..., Any]


class Op(StrEnum):
    """Every IR op. Members are named by the op (``arith.add`` is ``ADD``, ``math.sqrt`` is
    ``SQRT``) and, outside the elementwise dialects, with the dialect in front (``mem.load`` is
    ``MEM_LOAD``). Each member is defined once, in ``ir/ops/`` (``define``)."""

    # arith (ir/ops/arith.py)
    ADD = "arith.add"
    SUB = "arith.sub"
    MUL = "arith.mul"
    DIV = "arith.div"
    FLOORDIV = "arith.floordiv"
    MOD = "arith.mod"
    MIN = "arith.min"
    MAX = "arith.max"
    AND = "arith.and"
    OR = "arith.or"
    XOR = "arith.xor"
    SHL = "arith.shl"
    SHR = "arith.shr"
    NEG = "arith.neg"
    NOT = "arith.not"
    ABS = "arith.abs"
    CMP = "arith.cmp"
    CONSTANT = "arith.constant"
    CAST = "arith.cast"
    SELECT = "arith.select"
    # control flow (ir/ops/control.py)
    SCF_IF = "scf.if"
    SCF_FOR = "scf.for"
    SCF_WHILE = "scf.while"
    SCF_CONDITION = "scf.condition"
    SCF_INLINE = "scf.inline"
    CF_BREAK = "cf.break"
    CF_CONTINUE = "cf.continue"
    CF_RETURN = "cf.return"
    # math (ir/ops/math.py)
    SQRT = "math.sqrt"
    EXP = "math.exp"
    EXP2 = "math.exp2"
    EXPM1 = "math.expm1"
    LOG = "math.log"
    LOG2 = "math.log2"
    LOG10 = "math.log10"
    LOG1P = "math.log1p"
    SIN = "math.sin"
    COS = "math.cos"
    TAN = "math.tan"
    ASIN = "math.asin"
    ACOS = "math.acos"
    ATAN = "math.atan"
    SINH = "math.sinh"
    COSH = "math.cosh"
    TANH = "math.tanh"
    ASINH = "math.asinh"
    ACOSH = "math.acosh"
    ATANH = "math.atanh"
    ERF = "math.erf"
    ERFC = "math.erfc"
    ERFINV = "math.erfinv"
    FLOOR = "math.floor"
    CEIL = "math.ceil"
    TRUNC = "math.trunc"
    FABS = "math.fabs"
    CBRT = "math.cbrt"
    RSQRT = "math.rsqrt"
    RINT = "math.rint"
    LGAMMA = "math.lgamma"
    POW = "math.pow"
    ATAN2 = "math.atan2"
    HYPOT = "math.hypot"
    COPYSIGN = "math.copysign"
    FMOD = "math.fmod"
    LDEXP = "math.ldexp"
    ISNAN = "math.isnan"
    ISINF = "math.isinf"
    ISFINITE = "math.isfinite"
    # memory and local slots (ir/ops/memory.py)
    MEM_LOAD = "mem.load"
    MEM_STORE = "mem.store"
    MEM_ATOMIC = "mem.atomic"
    MEM_DIM = "mem.dim"
    LOCAL_ALLOC = "local.alloc"
    LOCAL_LOAD = "local.load"
    LOCAL_STORE = "local.store"
    # tensor cores and asynchronous copies (ir/ops/mma.py)
    WARP_MMA = "warp.mma"
    WARP_LDMATRIX = "warp.ldmatrix"
    MMA_PACK = "mma.pack"
    MEM_ASYNC_COPY = "mem.async_copy"
    MEM_ASYNC_COMMIT = "mem.async_commit"
    MEM_ASYNC_WAIT = "mem.async_wait"
    # SIMT threads, blocks and shared memory (ir/ops/simt.py)
    SIMT_PRINT = "simt.print"
    SIMT_THREAD_INDEX = "simt.thread_index"
    SIMT_INDEX_VALUE = "simt.index_value"
    SIMT_SPECIAL = "simt.special"
    SIMT_BARRIER = "simt.barrier"
    SIMT_SHARED_ALLOC = "simt.shared_alloc"
    # tiles (ir/ops/tile.py)
    TILE_BLOCK_INDEX = "tile.block_index"
    TILE_NUM_BLOCKS = "tile.num_blocks"
    TILE_LAUNCH_BLOCK = "tile.launch_block"
    TILE_LAUNCH_BLOCKS = "tile.launch_blocks"
    TILE_NUM_TILES = "tile.num_tiles"
    TILE_SELECT = "tile.select"
    TILE_PARTIAL_STORE = "tile.partial_store"
    TILE_PARTIAL_LOAD = "tile.partial_load"
    TILE_DIM = "tile.dim"
    TILE_LOAD = "tile.load"
    TILE_LOAD_OWN = "tile.load_own"
    TILE_STORE = "tile.store"
    TILE_SPLAT = "tile.splat"
    TILE_BROADCAST = "tile.broadcast"
    TILE_RESHAPE = "tile.reshape"
    TILE_PERMUTE = "tile.permute"
    TILE_REDUCE = "tile.reduce"
    TILE_ARGMAX = "tile.argmax"
    TILE_IOTA = "tile.iota"
    TILE_MMA = "tile.mma"
    # tile memory (ir/ops/tile_memory.py)
    TILE_GATHER = "tile.gather"
    TILE_SCATTER = "tile.scatter"
    TILE_ATOMIC = "tile.atomic"
    TILE_ATOMIC_CAS = "tile.atomic_cas"
    # warp collectives (ir/ops/warp.py)
    WARP_SHUFFLE = "warp.shuffle"
    WARP_VOTE = "warp.vote"
    WARP_REDUCE = "warp.reduce"

    @property
    def dialect(self) -> str:
        """The part before the dot: ``Op.ADD.dialect == "arith"``."""
        return self.value.partition(".")[0]

    @property
    def base(self) -> str:
        """The name without its dialect: ``Op.SQRT.base == "sqrt"`` (libdevice's ``__nv_sqrt``,
        Python's ``math.sqrt``)."""
        return self.value.partition(".")[2]


@dataclass(frozen=True)
class OpDef:
    name: Op
    doc: str
    verify: Verifier | None     # the checks of operand types and attributes (None: no more)
    regions: int = 0
    operands: int | None = None  # how many operands and results (None: it varies, as for the
    results: int | None = None   # control ops and the printing and shuffling ones)
    # of a math function, what each operand is: "float" (the float operands share the result's
    # type) or "i32" (an integer, which the frontend saturates to i32: ldexp's exponent); empty
    # for every float operand
    operand_kinds: tuple[str, ...] = ()
    terminator: bool = False
    side_effects: bool = False
    track: str = "both"         # "simt", "tile" or "both": the kernels whose IR may hold it
    checked_read: bool = False  # a read of user memory that passes/bounds.py may check
    warp_collective: bool = False  # every lane of the warp takes part (passes/warps.py)
    # the functions users call for it, as (module, name) pairs (("math", "sin"), ("np", "sin")):
    # the frontend maps those that exist to the op
    user_names: tuple[tuple[str, str], ...] = ()
    # the result types from the operand types and attributes; None where the creator chooses
    # them (a constant's or cast's type, a local slot, a shared array, a broadcast's shape)
    result: ResultRule | None = None
    eval: Eval | None = None    # the reference semantics (above); None for ops with effects,
    #                             regions or memory, which each backend's interpreter defines


REGISTRY: dict[Op, OpDef] = {}
TRACKS = ("simt", "tile", "both")


def no_results(types, attrs) -> list:
    """The result rule of an op without results."""
    return []


def like_first(types, attrs) -> list:
    """The result rule of an op whose one result has its first operand's type."""
    return [types[0]]


def only(track: str) -> list[Op]:
    """The ops that only ``track``'s kernels use ("simt" or "tile")."""
    return [name for name, d in REGISTRY.items() if d.track == track]


def checked_reads() -> frozenset[Op]:
    """The reads of user memory that the bounds pass checks."""
    return frozenset(name for name, d in REGISTRY.items() if d.checked_read)


def warp_collectives() -> frozenset[Op]:
    """The ops that every lane of a warp must reach together."""
    return frozenset(name for name, d in REGISTRY.items() if d.warp_collective)


def define(name: Op, doc: str, verify: Verifier | None, **traits) -> OpDef:
    if not isinstance(name, Op):
        raise TypeError(f"op {name!r} is not an Op: add it to opdef.Op")
    if name in REGISTRY:
        raise ValueError(f"op '{name}' defined twice")
    if traits.get("track", "both") not in TRACKS:
        raise ValueError(f"op '{name}': track must be one of {TRACKS}")
    opdef = REGISTRY[name] = OpDef(name, doc, verify, **traits)
    return opdef


# Verifier building blocks -------------------------------------------------------------------

def all_of(*checks: Verifier) -> Verifier:
    def check(op: Operation):
        for c in checks:
            msg = c(op)
            if msg:
                return msg
        return None
    return check


# The op modules register themselves on import; this list is the complete set.
from fearless.ir.ops import (arith, control, math, memory, mma, simt, tile,  # noqa: E402,F401
                             tile_memory, warp)
