"""Module -> Tile IR bytecode: the deterministic writer behind ``Module.encode()``.

Job: walk a ``tir.Module`` once, interning strings, types and constants in first-use order, and
encode each op by walking its ``ops.py`` row. Same model, same bytes (the disk cache relies on
it); no debug section (the function records point at the reserved "unknown location" 0).
Refuses, with a CompileError naming the kernel, any op, flag or attribute the chosen version
lacks.

Layout (Tile IR spec "Binary Format"; NVIDIA/cuda-tile ``lib/Bytecode/Writer/BytecodeWriter.cpp``;
tile-ir.md §1): header ``7F 'TileIR' 00``, major, minor, u16 tag; sections Func (align 8),
Constant (align 8, only when non-empty), Type (align 4), String (align 4); end byte 0.
Function record: name string id, signature type id, flags (bit1 kernel, bit2 has hints up to
13.4), location index, [hints], [13.5: argument attributes], body length, ops.
"""
from __future__ import annotations

from fearless.backends.tileir import bytecode as bc
from fearless.backends.tileir.ops import REGION_TERMINATORS, SPECS
from fearless.backends.tileir.tir import (
    I32,
    PADDINGS,
    Block,
    Bounded,
    DivBy,
    Function,
    FuncType,
    Module,
    Op,
    PartitionViewType,
    PtrType,
    SameElements,
    Scalar,
    ScalarType,
    TensorViewType,
    TileType,
    TokenType,
)
from fearless.errors import CompileError


def _v(version) -> str:
    return f"{version[0]}.{version[1]}"


class _Writer:
    def __init__(self, version: tuple[int, int]):
        self.version = version
        self.strings, self.types, self.consts = bc.Table(), bc.Table(), bc.Table()
        self.ids: dict[int, int] = {}
        self.next_id = 0
        self.kernel = ""

    # --- tables ---------------------------------------------------------------------------

    def sid(self, s: str) -> int:
        return self.strings.intern(s.encode())

    def tid(self, t) -> int:
        w = bc.ByteWriter()
        if isinstance(t, ScalarType):
            w.byte(t.tag)
        elif isinstance(t, TokenType):
            w.byte(bc.TAG_TOKEN)
        elif isinstance(t, PtrType):
            pointee = self.tid(t.elem)
            w.byte(bc.TAG_PTR)
            if self.version >= (13, 4):
                w.uleb(0)  # optional-field flags: no pointer attribute
            w.uleb(pointee)
        elif isinstance(t, TileType):
            elem = self.tid(t.elem)
            w.byte(bc.TAG_TILE)
            w.uleb(elem)
            w.ints(t.shape, 8)
        elif isinstance(t, TensorViewType):
            elem = self.tid(t.elem)
            w.byte(bc.TAG_TENSOR_VIEW)
            if self.version >= (13, 4):
                w.uleb(0)
            w.uleb(elem)
            w.ints([bc.DYNAMIC if d is None else d for d in t.shape], 8)
            w.ints([bc.DYNAMIC if d is None else d for d in t.strides], 8)
        elif isinstance(t, PartitionViewType):
            tv = self.tid(t.tensor_view)
            w.byte(bc.TAG_PARTITION_VIEW)
            w.uleb(int(t.padding is not None))  # 13.3+ unified optional-field flags
            w.ints(t.tile_shape, 4)
            w.uleb(tv)
            w.ints(t.dim_map, 4)
            if t.padding is not None:
                w.byte(PADDINGS.index(t.padding))
        elif isinstance(t, FuncType):
            ids = [self.tid(p) for p in t.params], [self.tid(r) for r in t.results]
            w.byte(bc.TAG_FUNC)
            for group in ids:
                w.uleb(len(group))
                for i in group:
                    w.uleb(i)
        else:
            raise TypeError(f"not a Tile IR type: {t!r}")
        return self.types.intern(w.getvalue())

    def cid(self, data: bytes) -> int:
        w = bc.ByteWriter()
        w.uleb(len(data))
        w.raw(data)
        return self.consts.intern(w.getvalue())

    # --- attributes -----------------------------------------------------------------------

    def tagged_value(self, w: bc.ByteWriter, v) -> None:
        if isinstance(v, bool):
            w.byte(bc.ATTR_BOOL)
            w.byte(int(v))
        elif isinstance(v, int):
            w.byte(bc.ATTR_INTEGER)
            w.uleb(self.tid(I32))
            w.uleb(v & 0xFFFF_FFFF)
        else:
            raise TypeError(f"hint value {v!r}")

    def hints_untagged(self, w: bc.ByteWriter, hints) -> None:
        w.uleb(len(hints))
        for arch, items in hints:
            w.uleb(self.sid(arch))
            w.byte(bc.ATTR_DICT)
            w.uleb(len(items))
            for k, v in items:
                w.uleb(self.sid(k))
                self.tagged_value(w, v)

    def scalar_attr(self, w: bc.ByteWriter, s: Scalar) -> None:
        e = s.elem
        if e.kind == "float":
            w.byte(bc.ATTR_FLOAT)
            w.uleb(self.tid(e))
            bits = bc.float_bits(float(s.value), 32 if e.name == "tf32" else e.bits,
                                 bfloat=e.name == "bf16")
            w.sleb(bits)  # APInt of 9..64 bits: zigzag varint of the raw bits
        else:
            w.byte(bc.ATTR_INTEGER)
            w.uleb(self.tid(e))
            w.uleb(int(s.value) & ((1 << max(e.bits, 1)) - 1))

    def predicate(self, w: bc.ByteWriter, p) -> None:
        if isinstance(p, DivBy):
            w.byte(bc.ATTR_DIV_BY)
            w.uleb(p.divisor)
            w.byte((p.every is not None) | ((p.along is not None) << 1))
            for x in (p.every, p.along):
                if x is not None:
                    w.sleb(x)
        elif isinstance(p, Bounded):
            w.byte(bc.ATTR_BOUNDED)
            w.byte((p.lb is not None) | ((p.ub is not None) << 1))
            for x in (p.lb, p.ub):
                if x is not None:
                    w.sleb(x)
        elif isinstance(p, SameElements):
            w.byte(bc.ATTR_SAME_ELEMENTS)
            w.ints(p.values, 8)
        else:
            raise TypeError(f"not an assume predicate: {p!r}")

    # --- ops ------------------------------------------------------------------------------

    def refuse(self, what: str, since) -> None:
        raise CompileError(f"{what} needs Tile IR bytecode {_v(since)} or newer; this module "
                           f"is emitted as {_v(self.version)}", kernel=self.kernel or None,
                           help="pick a newer bytecode version (tileiras --list-versions)")

    def vid(self, v) -> int:
        try:
            return self.ids[id(v)]
        except KeyError:
            raise ValueError(f"{v!r} is used where it is not defined") from None

    def define(self, values) -> None:
        for v in values:
            self.ids[id(v)] = self.next_id
            self.next_id += 1

    def block_ops(self, block: Block) -> bytes:
        w = bc.ByteWriter()
        for op in block.ops:
            self.op(w, op)
        return w.getvalue()

    def op(self, w: bc.ByteWriter, op: Op) -> None:
        spec = SPECS.get(op.name)
        if spec is None:
            raise ValueError(f"unknown op {op.name!r}")
        if self.version < spec.since:
            self.refuse(f"op '{op.name}'", spec.since)
        f = op.fields
        w.uleb(spec.opcode)
        for fld in spec.fields:
            k = fld.kind
            if k == "res":
                w.uleb(self.tid(op.results[0].type))
            elif k == "resn":
                for r in op.results:
                    w.uleb(self.tid(r.type))
            elif k == "res*":
                w.uleb(len(op.results))
                for r in op.results:
                    w.uleb(self.tid(r.type))
            elif k == "flags":
                bits = 0
                for i, (name, since) in enumerate(fld.bits):
                    on = f.get(name) is not None if name in spec.optional_names else \
                        bool(f.get(name))
                    if on and self.version < since:
                        self.refuse(f"'{op.name}' with {name}", since)
                    bits |= on << i
                if self.version >= fld.since:
                    w.uleb(bits)
            elif self.version < fld.since:
                if f.get(fld.name) not in (None, fld.default):
                    self.refuse(f"'{op.name}' with {fld.name}={f[fld.name]!r}", fld.since)
            elif k == "enum":
                w.byte(int(f[fld.name]))
            elif k == "enum?":
                if f.get(fld.name) is not None:
                    w.byte(int(f[fld.name]))
            elif k == "hints":
                if f.get(fld.name) is not None:
                    self.hints_untagged(w, f[fld.name])
            elif k == "bools":
                w.ints(f.get(fld.name) or (0,) * len(f["index"]), 1)
            elif k == "uint":
                w.uleb(f[fld.name])
            elif k == "bool":
                w.byte(int(bool(f[fld.name])))
            elif k == "i32s":
                w.ints(f[fld.name], 4)
            elif k == "pred":
                self.predicate(w, f[fld.name])
            elif k == "idents":
                w.uleb(len(f[fld.name]))
                for s in f[fld.name]:
                    self.scalar_attr(w, s)
            elif k == "const":
                w.uleb(self.cid(f[fld.name]))
            elif k == "opnd":
                w.uleb(self.vid(f[fld.name]))
            elif k == "opnd?":
                if f.get(fld.name) is not None:
                    w.uleb(self.vid(f[fld.name]))
            elif k in ("opnds", "forops"):
                w.uleb(len(f[fld.name]))
                for v in f[fld.name]:
                    w.uleb(self.vid(v))
            elif k == "regions":
                self.regions(w, op, fld.n)
            else:  # pragma: no cover - the table and this walk are kept in step by tests
                raise AssertionError(f"field kind {k}")
        self.define(op.results)

    def regions(self, w: bc.ByteWriter, op: Op, n: int) -> None:
        if len(op.regions) != n:
            raise ValueError(f"{op.name} needs {n} regions, has {len(op.regions)}")
        w.uleb(n)
        for i, block in enumerate(op.regions):
            last = block.ops[-1].name if block.ops else None
            if last not in REGION_TERMINATORS[op.name]:
                raise ValueError(f"in kernel {self.kernel!r}: region {i} of {op.name} ends "
                                 f"with {last or 'nothing'}, not a terminator "
                                 f"({' or '.join(sorted(REGION_TERMINATORS[op.name]))})")
            saved = self.next_id  # region values are numbered on, then released after it
            w.byte(1)  # one block per region
            w.uleb(len(block.args))
            for a in block.args:
                w.uleb(self.tid(a.type))
            self.define(block.args)
            body = self.block_ops(block)
            w.uleb(len(block.ops))
            w.raw(body)
            self.next_id = saved

    # --- functions and the file -------------------------------------------------------------

    def function(self, out: bc.ByteWriter, fn: Function) -> None:
        self.kernel = fn.name
        if not fn.body.ops or fn.body.ops[-1].name != "return":
            raise ValueError(f"kernel {fn.name!r} must end with return")
        out.uleb(self.sid(fn.name))
        out.uleb(self.tid(fn.type))
        v135 = self.version >= (13, 5)
        hints = fn.hints if fn.entry else None
        if v135 and fn.entry and hints is None:
            hints = (("default", ()),)  # 13.5 entry records always carry hints
        flags = (bc.FN_KERNEL if fn.entry else 0) | \
            (bc.FN_HAS_HINTS if hints is not None and not v135 else 0)
        out.byte(flags)
        out.uleb(0)  # location: the reserved "unknown" index (no debug section)
        if hints is not None:
            out.byte(bc.ATTR_OPT_HINTS)
            self.hints_untagged(out, hints)
        if v135:
            out.byte(bc.ATTR_ARRAY)  # argument attributes: none
            out.uleb(0)
        self.ids, self.next_id = {}, 0
        self.define(fn.params)
        body = self.block_ops(fn.body)
        out.uleb(len(body))
        out.raw(body)


def encode(module: Module) -> bytes:
    """Encode `module` for its bytecode version; see the module docstring for the layout."""
    w = _Writer(module.version)
    func = bc.ByteWriter()
    func.uleb(len(module.functions))
    for fn in module.functions:
        w.function(func, fn)
    out = bc.ByteWriter()
    out.raw(bc.MAGIC)
    out.byte(module.version[0])
    out.byte(module.version[1])
    out.raw((0).to_bytes(2, "little"))
    bc.write_section(out, bc.SEC_FUNC, func.getvalue(), 8)
    if w.consts.index:
        bc.write_section(out, bc.SEC_CONSTANT, bc.write_table(w.consts.blobs(), 8), 8)
    bc.write_section(out, bc.SEC_TYPE, bc.write_table(w.types.blobs(), 4), 4)
    bc.write_section(out, bc.SEC_STRING, bc.write_table(w.strings.blobs(), 4), 4)
    out.byte(bc.SEC_END)
    return out.getvalue()
