"""The typed Tile IR model: types, enums, attributes, values, ops, blocks, functions, modules.

Job: the in-memory form of a CUDA Tile IR module that ``builder.py`` builds, ``writer.py``
encodes and ``reader.py`` decodes; plus ``dump()``, a stable text form used for structural
equality and debugging. Pure data and stdlib only.

Types (frozen, hashable, so the writer's type table deduplicates by value):
  ``I1 I8 I16 I32 I64 F16 BF16 F32 TF32 F64``  element types;
  ``tile(elem, shape=())``                     a tile; 0-d is a scalar (``tile(I32)``), elem may
                                               be ``ptr(F32)`` for pointer parameters;
  ``ptr(elem)``; ``TOKEN``;
  ``tensor_view(elem, shape, strides)``        ``None`` = dynamic (``?``) extent or stride;
  ``partition_view(tile_shape, tv, dim_map=None, padding=None)``  padding: None or
                                               "zero" "neg_zero" "nan" "pos_inf" "neg_inf".
Enums mirror the bytecode enum bytes (``Rounding``, ``Signedness``, ``Overflow``, ``CmpPred``,
``Ordering``, ``MemOrder``, ``MemScope``, ``AtomicMode``); assume predicates are ``DivBy``,
``Bounded``, ``SameElements``.

Source of facts: NVIDIA/cuda-tile ``Types.td``, ``AttrDefs.td`` and ``BytecodeTypeOpcodes.td``
(enum values and type tags), checked against ``tileirdisasm``.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

# --- types -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScalarType:
    name: str
    tag: int    # the type tag byte
    bits: int
    kind: str   # "int" or "float"

    def __repr__(self) -> str:
        return self.name


I1 = ScalarType("i1", 0, 1, "int")
I8 = ScalarType("i8", 1, 8, "int")
I16 = ScalarType("i16", 2, 16, "int")
I32 = ScalarType("i32", 3, 32, "int")
I64 = ScalarType("i64", 4, 64, "int")
F16 = ScalarType("f16", 5, 16, "float")
BF16 = ScalarType("bf16", 6, 16, "float")
F32 = ScalarType("f32", 7, 32, "float")
TF32 = ScalarType("tf32", 8, 32, "float")
F64 = ScalarType("f64", 9, 64, "float")
SCALARS = {t.tag: t for t in (I1, I8, I16, I32, I64, F16, BF16, F32, TF32, F64)}


@dataclass(frozen=True)
class PtrType:
    elem: ScalarType

    def __repr__(self) -> str:
        return f"ptr<{self.elem!r}>"


@dataclass(frozen=True)
class TileType:
    elem: ScalarType | PtrType
    shape: tuple[int, ...] = ()

    @property
    def rank(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return "tile<" + "".join(f"{d}x" for d in self.shape) + f"{self.elem!r}>"


@dataclass(frozen=True)
class TokenType:
    def __repr__(self) -> str:
        return "token"


def _dims(xs) -> str:
    return "x".join("?" if d is None else str(d) for d in xs)


@dataclass(frozen=True)
class TensorViewType:
    elem: ScalarType
    shape: tuple[int | None, ...]
    strides: tuple[int | None, ...]

    def __repr__(self) -> str:
        strides = ",".join("?" if s is None else str(s) for s in self.strides)
        return f"tensor_view<{_dims(self.shape)}x{self.elem!r}, strides=[{strides}]>"


PADDINGS = ("zero", "neg_zero", "nan", "pos_inf", "neg_inf")  # bytecode byte = index


@dataclass(frozen=True)
class PartitionViewType:
    tile_shape: tuple[int, ...]
    tensor_view: TensorViewType
    dim_map: tuple[int, ...]
    padding: str | None = None

    def __repr__(self) -> str:
        pad = f", padding={self.padding}" if self.padding else ""
        return (f"partition_view<tile=({_dims(self.tile_shape)}), {self.tensor_view!r}, "
                f"dim_map={list(self.dim_map)}{pad}>")


@dataclass(frozen=True)
class FuncType:
    params: tuple
    results: tuple = ()


Type = ScalarType | PtrType | TileType | TokenType | TensorViewType | PartitionViewType | FuncType
TOKEN = TokenType()


def tile(elem: ScalarType | PtrType, shape=()) -> TileType:
    """A tile type; ``shape=()`` is a 0-d tile, i.e. a scalar (kernel scalars are 0-d tiles)."""
    if not isinstance(elem, (ScalarType, PtrType)):
        raise TypeError(f"tile element must be a scalar or pointer type, not {elem!r}")
    return TileType(elem, tuple(int(d) for d in shape))


def ptr(elem: ScalarType) -> PtrType:
    return PtrType(elem)


def _ints_or_none(xs) -> tuple:
    return tuple(None if x is None else int(x) for x in xs)


def tensor_view(elem: ScalarType, shape, strides) -> TensorViewType:
    shape, strides = tuple(shape), tuple(strides)
    if len(shape) != len(strides):
        raise ValueError(f"tensor_view shape {shape} and strides {strides} differ in rank")
    return TensorViewType(elem, _ints_or_none(shape), _ints_or_none(strides))


def partition_view(tile_shape, tv: TensorViewType, dim_map=None,
                   padding: str | None = None) -> PartitionViewType:
    tile_shape = tuple(int(d) for d in tile_shape)
    dim_map = tuple(range(len(tile_shape))) if dim_map is None else tuple(int(d) for d in dim_map)
    if padding is not None and padding not in PADDINGS:
        raise ValueError(f"padding must be one of {PADDINGS}, not {padding!r}")
    return PartitionViewType(tile_shape, tv, dim_map, padding)


# --- enums (values are the bytecode bytes) ----------------------------------------------------


class Rounding(enum.IntEnum):
    NEAREST_EVEN = 0
    ZERO = 1
    NEGATIVE_INF = 2
    POSITIVE_INF = 3
    APPROX = 4
    FULL = 5
    NEAREST_INT_TO_ZERO = 6
    NEAREST_AWAY = 7


class Signedness(enum.IntEnum):
    UNSIGNED = 0
    SIGNED = 1


class Overflow(enum.IntEnum):
    NONE = 0
    NSW = 1
    NUW = 2
    NW = 3


class CmpPred(enum.IntEnum):
    EQ = 0
    NE = 1
    LT = 2
    LE = 3
    GT = 4
    GE = 5


class Ordering(enum.IntEnum):
    UNORDERED = 0
    ORDERED = 1


class MemOrder(enum.IntEnum):
    WEAK = 0
    RELAXED = 1
    ACQUIRE = 2
    RELEASE = 3
    ACQ_REL = 4


class MemScope(enum.IntEnum):
    TL_BLK = 0
    DEVICE = 1
    SYS = 2


class AtomicMode(enum.IntEnum):
    """``atomic_rmw_tko``'s mode (AttrDefs.td AtomicRMWMode)."""
    AND = 0
    OR = 1
    XOR = 2
    ADD = 3
    ADDF = 4
    MAX = 5
    MIN = 6
    UMAX = 7
    UMIN = 8
    XCHG = 9


def coerce_enum(cls: type[enum.IntEnum], value) -> enum.IntEnum:
    """Accept an enum member or its name in any case (``"nearest_even"``, ``"lt"``)."""
    if isinstance(value, cls):
        return value
    if isinstance(value, str):
        try:
            return cls[value.upper()]
        except KeyError:
            names = ", ".join(m.name.lower() for m in cls)
            raise ValueError(f"{cls.__name__} has no member {value!r} (one of: {names})") \
                from None
    raise TypeError(f"expected a {cls.__name__}, got {value!r}")


# --- attributes -------------------------------------------------------------------------------


@dataclass(frozen=True)
class DivBy:
    """``assume div_by<divisor[, every e along a]>``: the value (or pointer) is a multiple."""
    divisor: int
    every: int | None = None
    along: int | None = None


@dataclass(frozen=True)
class Bounded:
    """``assume bounded<lb, ub>``; None = unbounded on that side."""
    lb: int | None = None
    ub: int | None = None


@dataclass(frozen=True)
class SameElements:
    """``assume same_elements<[...]>``: groups of this size along each dim hold equal values."""
    values: tuple[int, ...]


Predicate = DivBy | Bounded | SameElements


@dataclass(frozen=True)
class Scalar:
    """A typed scalar attribute (reduce/scan identities): elem type + Python value."""
    elem: ScalarType
    value: int | float


Hints = tuple[tuple[str, tuple[tuple[str, object], ...]], ...]


def normalize_hints(hints, always_default: bool) -> Hints | None:
    """{arch: {key: int|bool}} -> a tuple form with keys sorted, as MLIR dictionaries are.

    cuTile always writes a ``default`` entry for entry functions; we do the same.
    """
    if hints is None and not always_default:
        return None
    hints = dict(hints or {})
    if always_default:
        hints.setdefault("default", {})
    archs = sorted(hints)
    out = []
    for arch in archs:
        items = hints[arch]
        if not isinstance(items, dict):
            raise TypeError(f"hints for {arch!r} must be a dict, got {items!r}")
        for k, v in items.items():
            if not isinstance(v, (bool, int)):
                raise TypeError(f"hint {arch}.{k} must be an int or bool, got {v!r}")
        out.append((arch, tuple(sorted(items.items()))))
    return tuple(out)


# --- values, ops, blocks, functions, modules --------------------------------------------------


class Value:
    """An SSA value: a function parameter, a block argument or an op result. Knows its type."""
    __slots__ = ("index", "owner", "type")

    def __init__(self, type: Type, owner=None, index: int = 0):
        self.type, self.owner, self.index = type, owner, index

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape if isinstance(self.type, TileType) else ()

    @property
    def elem(self):
        return self.type.elem

    def __repr__(self) -> str:
        return f"<Value {self.type!r}>"


@dataclass(eq=False)
class Op:
    """One operation. ``fields`` holds attributes and operands by the names of its ops.py row."""
    name: str
    results: tuple[Value, ...] = ()
    fields: dict = field(default_factory=dict)
    regions: list[Block] = field(default_factory=list)

    @property
    def result(self) -> Value:
        if len(self.results) != 1:
            raise ValueError(f"{self.name} has {len(self.results)} results, not one")
        return self.results[0]


@dataclass(eq=False)
class Block:
    """The single block of a region: arguments and ops (the last one must be a terminator)."""
    args: list[Value] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)


@dataclass(eq=False)
class Function:
    name: str
    type: FuncType
    params: list[Value]
    body: Block
    entry: bool = True
    hints: Hints | None = None

    def builder(self):
        """A Builder that appends to this function's body."""
        from fearless.backends.tileir.builder import Builder
        return Builder(self.body)


class Module:
    """A Tile IR module: entry functions, emitted for one bytecode version.

    ``version``: (13, 3), (13, 4) or (13, 5); ``encode()`` refuses ops or flags the version
    lacks. ``entry(name, param_types, hints=None)`` adds a kernel and returns its Function;
    build its body with ``fn.builder()``.
    """

    def __init__(self, version: tuple[int, int] = (13, 4)):
        from fearless.backends.tileir.ops import check_version
        check_version(tuple(version))
        self.version = tuple(version)
        self.functions: list[Function] = []

    def entry(self, name: str, param_types, hints=None) -> Function:
        param_types = tuple(param_types)
        for t in param_types:
            if not isinstance(t, TileType):
                raise TypeError(f"entry {name!r}: parameters are tiles (scalars are 0-d "
                                f"tiles), got {t!r}")
        if any(f.name == name for f in self.functions):
            raise ValueError(f"a function named {name!r} already exists")
        fn = Function(name, FuncType(param_types), [], Block(), True,
                      normalize_hints(hints, always_default=True))
        fn.params = [Value(t, fn, i) for i, t in enumerate(param_types)]
        fn.body.args = fn.params
        self.functions.append(fn)
        return fn

    def encode(self) -> bytes:
        """The bytecode: deterministic, tables deduplicated, no debug section."""
        from fearless.backends.tileir.writer import encode
        return encode(self)

    def dump(self) -> str:
        return dump(self)


# --- stable text form -------------------------------------------------------------------------


def dump(module: Module) -> str:
    """A deterministic text form; two modules are structurally equal iff their dumps are."""
    lines = [f"module version={module.version[0]}.{module.version[1]}"]
    for fn in module.functions:
        names: dict[int, str] = {}
        for v in fn.params:
            names[id(v)] = f"%{len(names)}"
        params = ", ".join(f"{names[id(v)]}: {v.type!r}" for v in fn.params)
        lines.append(f"entry @{fn.name}({params}) hints={fn.hints!r} {{")
        _dump_block(fn.body, names, lines, "  ")
        lines.append("}")
    return "\n".join(lines) + "\n"


def _fmt(x, names) -> str:
    if isinstance(x, Value):
        return names.get(id(x), "%<undefined>")
    if isinstance(x, (list, tuple)):
        return "[" + ", ".join(_fmt(y, names) for y in x) + "]"
    if isinstance(x, enum.Enum):
        return x.name.lower()
    if isinstance(x, bytes):
        return "0x" + x.hex()
    return repr(x)


def _dump_block(block: Block, names: dict, lines: list, ind: str) -> None:
    for op in block.ops:
        for v in op.results:
            names[id(v)] = f"%{len(names)}"
        res = ", ".join(names[id(v)] for v in op.results)
        types = ", ".join(repr(v.type) for v in op.results)
        body = " ".join(f"{k}={_fmt(v, names)}" for k, v in op.fields.items())
        lines.append(f"{ind}{res + ' = ' if res else ''}{op.name} {body}"
                     f"{' : ' + types if types else ''}")
        for region in op.regions:
            for v in region.args:
                names[id(v)] = f"%{len(names)}"
            args = ", ".join(f"{names[id(v)]}: {v.type!r}" for v in region.args)
            lines.append(f"{ind}  ({args}) {{")
            _dump_block(region, names, lines, ind + "    ")
            lines.append(f"{ind}  }}")
