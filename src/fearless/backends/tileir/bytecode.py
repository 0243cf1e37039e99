"""The byte level of CUDA Tile IR bytecode: varints, interning tables, sections, scalar packing.

Job: the container primitives that ``writer.py`` and ``reader.py`` share, so that both sides of
the format are written down once. Nothing here knows about ops or types beyond their tags.

Source of facts: the Tile IR spec's "Binary Format" chapter (container, section ids, type tags)
and NVIDIA/cuda-tile (Apache-2.0 WITH LLVM-exception) ``lib/Bytecode/BytecodeEnums.h``,
``lib/Bytecode/Writer/BytecodeWriter.cpp``; every byte checked against ``tileirdisasm`` (see
/work/shared/reference/tile-ir.md §1). Where the C++ comments and real files disagree (varint
flavour, padding byte), the real files win: plain LEB128 varints, padding byte ``0xCB``.
"""
from __future__ import annotations

import struct

from fearless import dtypes

MAGIC = b"\x7fTileIR\x00"
PAD = 0xCB  # the padding byte real files use (not the 0xCF some comments claim)

# section ids; the high bit of the id byte says "an alignment varint follows"
SEC_END, SEC_STRING, SEC_FUNC, SEC_DEBUG, SEC_CONSTANT, SEC_TYPE, SEC_GLOBAL, SEC_PRODUCER = \
    range(8)

# type tags (BytecodeTypeOpcodes.td); scalar element types are a single tag byte
TAG_PTR, TAG_TILE, TAG_TENSOR_VIEW, TAG_PARTITION_VIEW, TAG_FUNC, TAG_TOKEN = 12, 13, 14, 15, 16, 17

# self-describing ("tagged") attribute tags (BytecodeAttrOpcodes.td)
ATTR_INTEGER, ATTR_FLOAT, ATTR_BOOL, ATTR_TYPE, ATTR_STRING, ATTR_ARRAY, ATTR_DENSE, \
    ATTR_DIV_BY, ATTR_SAME_ELEMENTS, ATTR_DICT, ATTR_OPT_HINTS, ATTR_BOUNDED = range(1, 13)

# function record flags (BytecodeEnums.h FunctionFlags)
FN_PRIVATE, FN_KERNEL, FN_HAS_HINTS = 0x01, 0x02, 0x04

DYNAMIC = -(1 << 63)  # a `?` extent or stride in a tensor_view type is stored as INT64_MIN


class FormatError(ValueError):
    """Malformed bytecode met by the reader (truncated, unknown tag, bad table)."""


class ByteWriter:
    """An append-only byte buffer with the encodings the format uses."""

    def __init__(self):
        self.buf = bytearray()

    def byte(self, b: int) -> None:
        self.buf.append(b & 0xFF)

    def raw(self, data: bytes) -> None:
        self.buf += data

    def uleb(self, x: int) -> None:
        if x < 0:
            raise ValueError(f"uleb of a negative number {x}")
        while True:
            low, x = x & 0x7F, x >> 7
            if x:
                self.buf.append(low | 0x80)
            else:
                self.buf.append(low)
                return

    def sleb(self, x: int) -> None:
        """Zigzag varint of a 64-bit two's complement value (cuda-tile writeSignedVarInt)."""
        u = x & 0xFFFF_FFFF_FFFF_FFFF
        sign = 0xFFFF_FFFF_FFFF_FFFF if u >> 63 else 0
        self.uleb(((u << 1) & 0xFFFF_FFFF_FFFF_FFFF) ^ sign)

    def ints(self, values, width: int) -> None:
        """`n` then n little-endian signed integers of `width` bytes (shapes, dim maps, flags)."""
        self.uleb(len(values))
        for v in values:
            self.buf += int(v).to_bytes(width, "little", signed=True)

    def pad_to(self, align: int) -> None:
        self.buf += bytes([PAD]) * (-len(self.buf) % align)

    def getvalue(self) -> bytes:
        return bytes(self.buf)

    def __len__(self) -> int:
        return len(self.buf)


class ByteReader:
    """A cursor over bytes that mirrors ByteWriter; every overrun is a FormatError."""

    def __init__(self, data: bytes, pos: int = 0, end: int | None = None):
        self.data, self.pos = data, pos
        self.end = len(data) if end is None else end

    def _need(self, n: int) -> None:
        if self.pos + n > self.end:
            raise FormatError(f"truncated bytecode at offset {self.pos}")

    def byte(self) -> int:
        self._need(1)
        self.pos += 1
        return self.data[self.pos - 1]

    def raw(self, n: int) -> bytes:
        self._need(n)
        self.pos += n
        return bytes(self.data[self.pos - n:self.pos])

    def uleb(self) -> int:
        x = shift = 0
        while True:
            b = self.byte()
            x |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return x

    def sleb(self) -> int:
        z = self.uleb()
        u = (z >> 1) ^ (0xFFFF_FFFF_FFFF_FFFF if z & 1 else 0)
        return u - (1 << 64) if u >> 63 else u

    def ints(self, width: int) -> tuple[int, ...]:
        n = self.uleb()
        return tuple(int.from_bytes(self.raw(width), "little", signed=True) for _ in range(n))

    def skip_pad(self, align: int, base: int = 0) -> None:
        while (self.pos - base) % align:
            if self.byte() != PAD:
                raise FormatError(f"bad padding byte at offset {self.pos - 1}")

    def at_end(self) -> bool:
        return self.pos >= self.end


class Table:
    """Interned blobs referenced by index, in first-use order; identical blobs share an entry.

    First-use order (not sorted) keeps a type's components ahead of it, which the reader needs,
    and makes the output a pure function of the model walk: same model, same bytes.
    """

    def __init__(self):
        self.index: dict[bytes, int] = {}

    def intern(self, blob: bytes) -> int:
        got = self.index.get(blob)
        if got is None:
            got = self.index[blob] = len(self.index)
        return got

    def blobs(self) -> list[bytes]:
        return list(self.index)


def write_table(blobs: list[bytes], index_width: int) -> bytes:
    """`count`, padding to the index width, `count` LE offsets, then the blobs back to back."""
    w = ByteWriter()
    w.uleb(len(blobs))
    w.pad_to(index_width)
    offset = 0
    for blob in blobs:
        w.raw(offset.to_bytes(index_width, "little"))
        offset += len(blob)
    for blob in blobs:
        w.raw(blob)
    return w.getvalue()


def read_table(payload: bytes, index_width: int) -> list[bytes]:
    r = ByteReader(payload)
    n = r.uleb()
    r.skip_pad(index_width)
    offsets = [int.from_bytes(r.raw(index_width), "little") for _ in range(n)]
    data = payload[r.pos:]
    ends = offsets[1:] + [len(data)]
    if any(a > b for a, b in zip(offsets, ends)):
        raise FormatError("table offsets are not increasing")
    return [bytes(data[a:b]) for a, b in zip(offsets, ends)]


def write_section(out: ByteWriter, section_id: int, payload: bytes, align: int) -> None:
    """Section header: id (|0x80 when aligned), length, [alignment, padding], then payload.

    The padding is placed so that the payload starts at a file offset that is a multiple of
    `align`; table offsets inside the section rely on that.
    """
    out.byte(section_id | (0x80 if align > 1 else 0))
    out.uleb(len(payload))
    if align > 1:
        out.uleb(align)
        out.pad_to(align)
    out.raw(payload)


def read_sections(data: bytes) -> tuple[tuple[int, int, int], dict[int, bytes]]:
    """Split a file into ((major, minor, tag), {section id: payload})."""
    if data[:8] != MAGIC:
        raise FormatError("not Tile IR bytecode (bad magic)")
    r = ByteReader(data, 8)
    version = (r.byte(), r.byte(), int.from_bytes(r.raw(2), "little"))
    sections: dict[int, bytes] = {}
    while True:
        head = r.byte()
        sid = head & 0x7F
        if sid == SEC_END:
            break
        length = r.uleb()
        if head & 0x80:
            r.skip_pad(r.uleb())
        if sid in sections:
            raise FormatError(f"section {sid} appears twice")
        sections[sid] = r.raw(length)
    return version, sections


# --- scalar packing for constants and float attributes (floats round through dtypes) -------

def float_bits(value: float, bits: int, bfloat: bool = False) -> int:
    """IEEE bit pattern of `value` as a float of `bits` bits, rounded once to nearest even
    (``dtypes.float_bits``: bf16 too, and past the largest finite value +-inf)."""
    if bits == 64:
        return struct.unpack("<Q", struct.pack("<d", value))[0]
    if bits in (16, 32):
        return dtypes.float_bits(value, dtypes.f32 if bits == 32 else
                                 dtypes.bf16 if bfloat else dtypes.f16)
    raise ValueError(f"no float encoding for {bits} bits")


def bits_float(bits_value: int, bits: int, bfloat: bool = False) -> float:
    """Inverse of float_bits (exact for every representable value)."""
    if bits == 64:
        return struct.unpack("<d", struct.pack("<Q", bits_value))[0]
    if bits == 32 and not bfloat:
        return struct.unpack("<f", struct.pack("<I", bits_value))[0]
    if bits == 16 and not bfloat:
        return struct.unpack("<e", struct.pack("<H", bits_value))[0]
    if bits == 16 and bfloat:
        return struct.unpack("<f", struct.pack("<I", bits_value << 16))[0]
    raise ValueError(f"no float encoding for {bits} bits")
