"""Byte-level units of the Tile IR writer: varints, tables, type blobs, header, version drift,
terminators and builder type checks. No external tools needed."""
from __future__ import annotations

import pytest

from fearless.backends.tileir import bytecode as bc
from fearless.backends.tileir.reader import decode
from fearless.backends.tileir.tir import (
    BF16,
    F16,
    F32,
    I1,
    I8,
    I32,
    I64,
    TOKEN,
    Module,
    Op,
    partition_view,
    ptr,
    tensor_view,
    tile,
)
from fearless.backends.tileir.writer import _Writer
from fearless.errors import CompileError
from tests.backends.tileir.kernels import vadd


@pytest.mark.parametrize("value, encoded", [
    (0, "00"), (1, "01"), (127, "7f"), (128, "8001"), (131, "8301"), (300, "ac02"),
    (2**32, "8080808010"), (2**64 - 1, "ffffffffffffffffff01"),
])
def test_uleb(value, encoded):
    w = bc.ByteWriter()
    w.uleb(value)
    assert w.getvalue().hex() == encoded
    assert bc.ByteReader(w.getvalue()).uleb() == value


@pytest.mark.parametrize("value, encoded", [
    (0, "00"), (-1, "01"), (1, "02"), (-2, "03"), (63, "7e"), (-64, "7f"), (64, "8001"),
])
def test_zigzag(value, encoded):
    w = bc.ByteWriter()
    w.sleb(value)
    assert w.getvalue().hex() == encoded
    assert bc.ByteReader(w.getvalue()).sleb() == value


def test_zigzag_extremes_round_trip():
    for v in (bc.DYNAMIC, 2**63 - 1, -(2**31), 2**31):
        w = bc.ByteWriter()
        w.sleb(v)
        assert bc.ByteReader(w.getvalue()).sleb() == v


def test_uleb_refuses_negative_and_truncation():
    with pytest.raises(ValueError):
        bc.ByteWriter().uleb(-1)
    with pytest.raises(bc.FormatError):
        bc.ByteReader(b"\x80").uleb()


def test_table_layout():
    data = bc.write_table([b"ab", b"c"], 4)
    assert data.hex() == "02cbcbcb" + "00000000" + "02000000" + "616263"
    assert bc.read_table(data, 4) == [b"ab", b"c"]
    t = bc.Table()
    assert [t.intern(b"x"), t.intern(b"y"), t.intern(b"x")] == [0, 1, 0]


def test_section_payload_is_aligned():
    out = bc.ByteWriter()
    out.raw(b"\x00" * 11)
    bc.write_section(out, bc.SEC_FUNC, b"\x01\x02", 8)
    assert out.getvalue()[11:].hex() == "820208" + "cbcb" + "0102"
    assert out.getvalue().index(b"\x01\x02") % 8 == 0


@pytest.mark.parametrize("version, t, blobs", [
    ((13, 4), tile(I32), ["03", "0d0000"]),
    ((13, 4), tile(F16, (128, 64)), ["05", "0d0002" + (128).to_bytes(8, "little").hex()
                                     + (64).to_bytes(8, "little").hex()]),
    ((13, 3), tile(ptr(F32)), ["07", "0c00", "0d0100"]),
    ((13, 4), tile(ptr(F32)), ["07", "0c0000", "0d0100"]),  # 13.4 adds a flags varint
    ((13, 4), TOKEN, ["11"]),
    ((13, 4), tensor_view(F32, (None,), (1,)),
     ["07", "0e000001" + "0000000000000080" + "01" + "0100000000000000"]),
    ((13, 3), partition_view((16,), tensor_view(BF16, (8,), (1,)), padding="nan"),
     ["06", "0e0001" + "0800000000000000" + "01" + "0100000000000000",
      "0f0101" + "10000000" + "0101" + "00000000" + "02"]),
])
def test_type_blobs(version, t, blobs):
    w = _Writer(version)
    w.tid(t)
    assert [b.hex() for b in w.types.blobs()] == blobs


def test_header_and_sections():
    data = vadd((13, 4)).encode()
    assert data[:12] == b"\x7fTileIR\x00\x0d\x04\x00\x00"
    assert data[-1] == 0
    version, sections = bc.read_sections(data)
    assert version == (13, 4, 0)
    assert set(sections) == {bc.SEC_FUNC, bc.SEC_TYPE, bc.SEC_STRING}  # no constants, no debug
    assert sections[bc.SEC_FUNC].endswith(b"\x5c\x00\x00")  # return: 0 types, 0 operands


def test_identical_constants_share_one_entry():
    m = Module((13, 4))
    fn = m.entry("k", [])
    b = fn.builder()
    b.constant(0.0, tile(F32, (4,)))
    b.constant(0.0, tile(F32, (8,)))
    b.constant(0, tile(I32))  # the same four zero bytes as f32 0.0
    b.constant(1, tile(I64))
    b.return_()
    _, sections = bc.read_sections(m.encode())
    assert len(bc.read_table(sections[bc.SEC_CONSTANT], 8)) == 2


def test_constants_pack_little_endian():
    m = Module((13, 4))
    b = m.entry("k", []).builder()
    b.constant([1.0, -2.0], tile(F16, (2,)))
    b.constant(1.0, tile(BF16, (4,)))
    b.constant([True, False], tile(I1, (2,)))
    b.constant(-1, tile(I32))
    b.return_()
    _, sections = bc.read_sections(m.encode())
    blobs = bc.read_table(sections[bc.SEC_CONSTANT], 8)
    # i1 is bit-packed: [True, False] is the one byte 0b01 (test_tileiras reads it back)
    assert [x.hex() for x in blobs] == ["04003c00c0", "02803f", "0101", "04ffffffff"]


def test_constant_size_is_checked():
    b = Module().entry("k", []).builder()
    with pytest.raises(ValueError, match="needs 1"):
        b.constant([1.0, 2.0, 3.0], tile(F32, (4,)))
    with pytest.raises(ValueError, match="does not fit"):
        b.constant(300, tile(I8))


def test_version_drift_is_refused_in_one_place():
    m = Module((13, 3))
    b = m.entry("k", [tile(F32)]).builder()
    b.ftoi(m.functions[0].params[0], I32, saturating=True)  # saturation is 13.4+
    b.return_()
    with pytest.raises(CompileError, match=r"kernel 'k': 'ftoi' with saturating needs Tile IR "
                                           r"bytecode 13.4 or newer; this module is emitted "
                                           r"as 13.3"):
        m.encode()
    m.version = (13, 4)
    assert decode(m.encode()).functions[0].body.ops[0].fields["saturating"] is True


def test_inbounds_needs_13_4():
    m = Module((13, 3))
    fn = m.entry("k", [tile(ptr(F32)), tile(I32)])
    b = fn.builder()
    tv = b.make_tensor_view(fn.params[0], tensor_view(F32, (None,), (1,)), [fn.params[1]])
    pv = b.make_partition_view(tv, (16,))
    b.load_view_tko(pv, [fn.params[1]], inbounds=[True])
    b.return_()
    with pytest.raises(CompileError, match="inbounds"):
        m.encode()


def test_unknown_version_is_refused():
    with pytest.raises(ValueError, match="13.3, 13.4, 13.5"):
        Module((13, 2))


def test_missing_terminator_raises_when_the_region_closes():
    b = Module().entry("k", [tile(I32)]).builder()
    zero = b.constant(0, tile(I32))
    with pytest.raises(ValueError, match="must end with continue, not nothing"), \
            b.for_(zero, zero, zero, []):
        pass
    with pytest.raises(ValueError, match="must end with yield"):
        b.reduce([b.constant(0.0, tile(F32, (4,)))], 0, [0.0], lambda x, acc: None)


def test_missing_terminator_raises_at_encode():
    m = Module()
    fn = m.entry("k", [tile(I32)])
    b = fn.builder()
    zero = b.constant(0, tile(I32))
    loop = b.for_(zero, zero, zero, [])  # never entered, so never closed
    b.return_()
    with pytest.raises(ValueError, match="region 0 of for ends with nothing"):
        m.encode()
    assert loop.results == ()
    fn.body.ops.pop()
    with pytest.raises(ValueError, match="must end with return"):
        m.encode()


def test_no_op_after_a_terminator():
    b = Module().entry("k", []).builder()
    b.return_()
    with pytest.raises(ValueError, match="after the terminator"):
        b.make_token()


def test_builder_type_checks():
    b = Module().entry("k", []).builder()
    f = b.constant(1.0, tile(F32, (4,)))
    i = b.constant(1, tile(I32, (4,)))
    with pytest.raises(TypeError):
        b.addf(i, i)
    with pytest.raises(TypeError):
        b.addf(f, b.constant(1.0, tile(F32, (8,))))
    with pytest.raises(ValueError):
        b.broadcast(f, (8,))
    with pytest.raises(TypeError):
        b.select(i, f, f)
    with pytest.raises(ValueError, match="Rounding has no member"):
        b.addf(f, f, rounding="sideways")
    assert b.cmpf("le", f, f).type == tile(I1, (4,))
    assert b.permute(b.reshape(f, (2, 2)), (1, 0)).type == tile(F32, (2, 2))


def test_result_less_if_gets_its_else():
    m = Module()
    fn = m.entry("k", [tile(I32)])
    b = fn.builder()
    c = b.cmpi("eq", fn.params[0], b.constant(0, tile(I32)))
    br = b.if_(c)
    with br.then_():
        b.yield_()
    b.return_()
    assert decode(m.encode()).encode() == m.encode()


def test_op_with_unknown_fields_is_refused():
    b = Module().entry("k", []).builder()
    with pytest.raises(TypeError, match="unknown fields"):
        b._emit("make_token", [TOKEN], colour="red")
    assert isinstance(Op("make_token"), Op)
