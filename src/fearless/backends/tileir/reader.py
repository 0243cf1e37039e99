"""Tile IR bytecode -> Module: the reader, for round-trip tests and ``inspect``.

Job: the inverse of ``writer.py``, walking the same ``ops.py`` rows, so that
``decode(m.encode()).encode() == m.encode()`` and ``dump(decode(m.encode())) == dump(m)``.
It reads what our writer emits (and cuTile exports of the same ops); sections it does not model
(Debug, Global, Producer) are skipped. Malformed input raises ``bytecode.FormatError``.

Source of facts: as for writer.py (NVIDIA/cuda-tile ``BytecodeReader.cpp``/``BytecodeWriter.cpp``,
the Tile IR spec's "Binary Format" chapter, tile-ir.md §1).
"""
from __future__ import annotations

from fearless.backends.tileir import bytecode as bc
from fearless.backends.tileir.ops import BY_OPCODE, SUPPORTED_VERSIONS
from fearless.backends.tileir.tir import (
    PADDINGS,
    SCALARS,
    TOKEN,
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
    TensorViewType,
    TileType,
    Value,
)

FormatError = bc.FormatError


def _dynamic(xs) -> tuple:
    return tuple(None if x == bc.DYNAMIC else x for x in xs)


class _Reader:
    def __init__(self, version, strings, type_blobs, consts):
        self.version = version
        self.strings, self.type_blobs, self.consts = strings, type_blobs, consts
        self.types: dict[int, object] = {}
        self.vals: list[Value] = []

    def string(self, i: int) -> str:
        try:
            return self.strings[i]
        except IndexError:
            raise FormatError(f"string index {i} out of range") from None

    def type(self, i: int):
        if i in self.types:
            return self.types[i]
        if i >= len(self.type_blobs):
            raise FormatError(f"type index {i} out of range")
        r = bc.ByteReader(self.type_blobs[i])
        tag = r.byte()
        if tag in SCALARS:
            t = SCALARS[tag]
        elif tag == bc.TAG_TOKEN:
            t = TOKEN
        elif tag == bc.TAG_PTR:
            if self.version >= (13, 4) and r.uleb():
                raise FormatError("pointer attributes are not modelled")
            t = PtrType(self.type(r.uleb()))
        elif tag == bc.TAG_TILE:
            elem = self.type(r.uleb())
            t = TileType(elem, r.ints(8))
        elif tag == bc.TAG_TENSOR_VIEW:
            if self.version >= (13, 4) and r.uleb():
                raise FormatError("tensor_view pointer attributes are not modelled")
            elem = self.type(r.uleb())
            t = TensorViewType(elem, _dynamic(r.ints(8)), _dynamic(r.ints(8)))
        elif tag == bc.TAG_PARTITION_VIEW:
            has_pad = r.uleb() & 1
            tile_shape = r.ints(4)
            tv = self.type(r.uleb())
            dim_map = r.ints(4)
            t = PartitionViewType(tile_shape, tv, dim_map, PADDINGS[r.byte()] if has_pad else None)
        elif tag == bc.TAG_FUNC:
            params = tuple(self.type(r.uleb()) for _ in range(r.uleb()))
            t = FuncType(params, tuple(self.type(r.uleb()) for _ in range(r.uleb())))
        else:
            raise FormatError(f"type tag {tag} is not modelled")
        self.types[i] = t
        return t

    # --- attributes -----------------------------------------------------------------------

    def tagged_value(self, r: bc.ByteReader):
        tag = r.byte()
        if tag == bc.ATTR_BOOL:
            return bool(r.byte())
        if tag == bc.ATTR_INTEGER:
            self.type(r.uleb())
            v = r.uleb()
            return v - (1 << 32) if v >> 31 else v
        raise FormatError(f"hint attribute tag {tag} is not modelled")

    def hints_untagged(self, r: bc.ByteReader):
        out = []
        for _ in range(r.uleb()):
            arch = self.string(r.uleb())
            if r.byte() != bc.ATTR_DICT:
                raise FormatError("hints entry is not a dictionary")
            items = tuple((self.string(r.uleb()), self.tagged_value(r)) for _ in range(r.uleb()))
            out.append((arch, items))
        return tuple(out)

    def scalar_attr(self, r: bc.ByteReader) -> Scalar:
        tag = r.byte()
        elem = self.type(r.uleb())
        if tag == bc.ATTR_FLOAT:
            raw = r.sleb() & 0xFFFF_FFFF_FFFF_FFFF
            return Scalar(elem, bc.bits_float(raw, 32 if elem.name == "tf32" else elem.bits,
                                              bfloat=elem.name == "bf16"))
        if tag == bc.ATTR_INTEGER:
            v = r.uleb()
            if elem.bits > 1 and v >> (elem.bits - 1):
                v -= 1 << elem.bits
            return Scalar(elem, v)
        raise FormatError(f"identity attribute tag {tag} is not modelled")

    def predicate(self, r: bc.ByteReader):
        tag = r.byte()
        if tag == bc.ATTR_DIV_BY:
            divisor, flags = r.uleb(), r.byte()
            every = r.sleb() if flags & 1 else None
            return DivBy(divisor, every, r.sleb() if flags & 2 else None)
        if tag == bc.ATTR_BOUNDED:
            flags = r.byte()
            lb = r.sleb() if flags & 1 else None
            return Bounded(lb, r.sleb() if flags & 2 else None)
        if tag == bc.ATTR_SAME_ELEMENTS:
            return SameElements(r.ints(8))
        raise FormatError(f"assume predicate tag {tag} is not modelled")

    # --- ops ------------------------------------------------------------------------------

    def value(self, i: int) -> Value:
        if i >= len(self.vals):
            raise FormatError(f"value %{i} used before it is defined")
        return self.vals[i]

    def block_ops(self, r: bc.ByteReader, n: int | None) -> list[Op]:
        ops = []
        while (len(ops) < n) if n is not None else not r.at_end():
            ops.append(self.op(r))
        return ops

    def op(self, r: bc.ByteReader) -> Op:
        at = r.pos
        opcode = r.uleb()
        spec = BY_OPCODE.get(opcode)
        if spec is None:
            raise FormatError(f"opcode {opcode} at offset {at} is not modelled")
        types, fields, regions, flags = [], {}, [], 0
        optional = spec.optional_names
        for fld in spec.fields:
            k, name = fld.kind, fld.name
            if k == "res":
                types = [self.type(r.uleb())]
            elif k == "resn":
                types = [self.type(r.uleb()) for _ in range(fld.n)]
            elif k == "res*":
                types = [self.type(r.uleb()) for _ in range(r.uleb())]
            elif k == "flags":
                flags = r.uleb() if self.version >= fld.since else 0
                for i, (bit, _) in enumerate(fld.bits):
                    if bit not in optional:
                        fields[bit] = bool(flags >> i & 1)
            elif self.version < fld.since:
                fields[name] = fld.default
            elif k == "enum":
                fields[name] = fld.enum(r.byte())
            elif k in ("enum?", "hints", "opnd?"):
                present = self._flag(spec, name, flags)
                fields[name] = None if not present else fld.enum(r.byte()) if k == "enum?" \
                    else self.hints_untagged(r) if k == "hints" else self.value(r.uleb())
            elif k == "bools":
                got = tuple(bool(b) for b in r.ints(1))
                fields[name] = got if any(got) else None
            elif k == "uint":
                fields[name] = r.uleb()
            elif k == "bool":
                fields[name] = bool(r.byte())
            elif k == "i32s":
                fields[name] = r.ints(4)
            elif k == "pred":
                fields[name] = self.predicate(r)
            elif k == "idents":
                fields[name] = tuple(self.scalar_attr(r) for _ in range(r.uleb()))
            elif k == "const":
                fields[name] = self.constant(r.uleb())
            elif k == "opnd":
                fields[name] = self.value(r.uleb())
            elif k in ("opnds", "forops"):
                fields[name] = tuple(self.value(r.uleb()) for _ in range(r.uleb()))
            elif k == "regions":
                regions = self.regions(r, fld.n)
        # fields in the builder's order: the row's named fields, then unit flags
        order = [f.name for f in spec.fields if f.name] + list(spec.unit_names)
        op = Op(spec.name, (), {k: fields[k] for k in order if k in fields}, regions)
        op.results = tuple(Value(t, op, i) for i, t in enumerate(types))
        self.vals.extend(op.results)
        return op

    @staticmethod
    def _flag(spec, name: str, flags: int) -> bool:
        bits = next(f.bits for f in spec.fields if f.kind == "flags")
        return bool(flags >> [b for b, _ in bits].index(name) & 1)

    def constant(self, i: int) -> bytes:
        if i >= len(self.consts):
            raise FormatError(f"constant index {i} out of range")
        r = bc.ByteReader(self.consts[i])
        return r.raw(r.uleb())

    def regions(self, r: bc.ByteReader, n: int) -> list[Block]:
        if r.uleb() != n:
            raise FormatError(f"expected {n} regions")
        out = []
        for _ in range(n):
            if r.byte() != 1:
                raise FormatError("only single-block regions are modelled")
            saved = len(self.vals)
            args = [Value(self.type(r.uleb())) for _ in range(r.uleb())]
            self.vals.extend(args)
            nops = r.uleb()
            out.append(Block(args, self.block_ops(r, nops)))
            del self.vals[saved:]  # region values are released after the region
        return out

    def function(self, r: bc.ByteReader) -> Function:
        name = self.string(r.uleb())
        ftype = self.type(r.uleb())
        flags = r.byte()
        r.uleb()  # location index (debug info is not modelled)
        entry = bool(flags & bc.FN_KERNEL)
        hints = None
        v135 = self.version >= (13, 5)
        if (entry and v135) or (not v135 and flags & bc.FN_HAS_HINTS):
            if r.byte() != bc.ATTR_OPT_HINTS:
                raise FormatError("entry hints are not an optimization_hints attribute")
            hints = self.hints_untagged(r)
        if v135 and (r.byte() != bc.ATTR_ARRAY or r.uleb() != 0):
            raise FormatError("argument attributes are not modelled")
        end = r.uleb()
        params = [Value(t) for t in ftype.params]
        fn = Function(name, ftype, params, Block(params), entry, hints)
        for i, p in enumerate(params):
            p.owner, p.index = fn, i
        self.vals = list(params)
        body = bc.ByteReader(r.data, r.pos, r.pos + end)
        fn.body.ops = self.block_ops(body, None)
        r.pos += end
        return fn


def decode(data: bytes) -> Module:
    """Parse bytecode into a Module (see the module docstring for what is modelled)."""
    (major, minor, _tag), sections = bc.read_sections(data)
    version = (major, minor)
    if version not in SUPPORTED_VERSIONS:
        raise FormatError(f"bytecode version {major}.{minor} is not one we read")
    strings = [s.decode() for s in bc.read_table(sections.get(bc.SEC_STRING, b"\0"), 4)]
    types = bc.read_table(sections.get(bc.SEC_TYPE, b"\0"), 4)
    consts = bc.read_table(sections[bc.SEC_CONSTANT], 8) if bc.SEC_CONSTANT in sections else []
    rd = _Reader(version, strings, types, consts)
    module = Module(version)
    r = bc.ByteReader(sections.get(bc.SEC_FUNC, b"\0"))
    module.functions = [rd.function(r) for _ in range(r.uleb())]
    return module
