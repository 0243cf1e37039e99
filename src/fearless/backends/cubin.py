"""Facts read from a cubin (an ELF file of NVIDIA machine code) without a GPU or a disassembler.

``frame_bytes(cubin)`` is the stack frame of each kernel: ptxas puts registers that do not fit
there (a spill), so in code with no calls and no local arrays, which is what tileiras emits for
a tile kernel, a frame above 0 means spills. The frame is the ``EIATTR_FRAME_SIZE`` attribute of
the cubin's ``.nv.info`` section (attribute 0x11, a ``(symbol index, bytes)`` pair per kernel,
in NVIDIA's "EIATTR" attribute records: a format byte, an attribute byte, then for the format
``EIFMT_SVAL`` (4) a 16-bit size and the payload). The id and layout were checked against
``cuobjdump -res-usage`` (its ``STACK:`` figure) on tileiras 13.4 and 13.5 cubins of a 128 x 256
f16 GEMM tile (1,792 bytes, spilling) and a 128 x 128 one (0).
"""
from __future__ import annotations

import struct

_ELF_MAGIC = b"\x7fELF"
_FRAME_SIZE = 0x11
_SVAL = 4
_SIZES = {1: 0, 2: 1, 3: 2}   # EIFMT_NVAL, BVAL, HVAL: payload bytes after the two-byte head


def _sections(data: bytes) -> dict[str, bytes]:
    """Section name -> contents of a 64-bit little-endian ELF file (a cubin)."""
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    entsize, count, names = struct.unpack_from("<HHH", data, 0x3A)
    heads = [struct.unpack_from("<IIQQQQ", data, shoff + k * entsize) for k in range(count)]
    strings = heads[names][4]
    out = {}
    for name, _type, _flags, _addr, offset, size in heads:
        end = data.index(b"\0", strings + name)
        out[data[strings + name:end].decode()] = data[offset:offset + size]
    return out


def frame_bytes(cubin: bytes) -> int:
    """The largest stack frame (bytes per thread) of the kernels in ``cubin``; 0 for a cubin
    without the attribute or for bytes that are not a 64-bit ELF file (no facts: no warning)."""
    if not cubin.startswith(_ELF_MAGIC) or len(cubin) < 0x40 or cubin[4] != 2:
        return 0
    try:
        info = _sections(cubin).get(".nv.info", b"")
    except (struct.error, ValueError, IndexError):
        return 0
    largest, k = 0, 0
    while k + 2 <= len(info):
        fmt, attr = info[k], info[k + 1]
        if fmt == _SVAL:
            (size,) = struct.unpack_from("<H", info, k + 2)
            if attr == _FRAME_SIZE and size == 8:
                largest = max(largest, struct.unpack_from("<II", info, k + 4)[1])
            k += 4 + size
        elif fmt in _SIZES:
            k += 2 + _SIZES[fmt]
        else:
            break   # an unknown record format: stop rather than misread
    return largest
