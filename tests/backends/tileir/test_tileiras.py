"""The tileiras wrapper, and the golden kernels through NVIDIA's tools (skipped if not installed).

Golden: each hand-built kernel disassembles to the expected op lines and compiles for sm_80 and
sm_90 at every bytecode version we emit. Errors: a bad module becomes a CompileError quoting
tileiras; a missing sibling is a BackendError naming it and the fix.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from fearless.backends.tileir import tileiras
from fearless.backends.tileir.ops import SUPPORTED_VERSIONS
from fearless.backends.tileir.tir import F32, I32, Module, ptr, tensor_view, tile
from fearless.errors import BackendError, CompileError
from tests.backends.tileir.kernels import EXPECTED, GOLDEN


@pytest.fixture(scope="module")
def toolchain():
    tc = tileiras.find()
    if tc is None:
        pytest.skip("tileiras is not installed (pip install 'fearless[tile]')")
    return tc


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_disassembly(toolchain, name):
    text = toolchain.disasm(GOLDEN[name]((13, 4)).encode())
    for line in EXPECTED[name]:
        assert line in text, f"{line!r} not in the disassembly of {name}:\n{text}"


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_compiles(toolchain, name, version, arch):
    if version not in toolchain.versions():
        pytest.skip(f"this tileiras does not read bytecode {version}")
    cubin = toolchain.compile(GOLDEN[name](version).encode(), arch, kernel=name)
    assert cubin[:4] == b"\x7fELF"


def test_entry_hints_are_read_and_compiled(toolchain):
    data = GOLDEN["gemm"]((13, 4), hints={"sm_90": {"num_cta_in_cga": 2, "occupancy": 1}},
                          fast_acc=True).encode()
    text = toolchain.disasm(data)
    assert "optimization_hints=<default = {}, sm_90 = {num_cta_in_cga = 2, occupancy = 1}>" \
        in text
    assert "fast_acc" in text
    assert toolchain.compile(data, "sm_90", kernel="gemm")[:4] == b"\x7fELF"


def _bad_module() -> Module:
    m = Module((13, 4))
    fn = m.entry("bad", [tile(ptr(F32)), tile(I32)])
    b = fn.builder()
    p, n = fn.params
    tv = b.make_tensor_view(p, tensor_view(F32, (None,), (1,)), [n])
    pv = b.make_partition_view(tv, (1000,))  # tile dims must be powers of two
    bx, _, _ = b.get_tile_block_id()
    x, _ = b.load_view_tko(pv, [bx])
    b.store_view_tko(x, pv, [bx])
    b.return_()
    return m


def test_tileiras_error_becomes_compile_error(toolchain):
    with pytest.raises(CompileError) as info:
        toolchain.compile(_bad_module().encode(), "sm_90", kernel="bad")
    text = str(info.value)
    assert text.startswith("kernel 'bad': tileiras could not compile the Tile IR for sm_90")
    assert "tile shape dimensions must have power of two length but got [1000]" in text
    assert "return code" not in text and "fearless-tileir-" not in text


def test_versions_and_pick(toolchain):
    versions = toolchain.versions()
    assert (13, 4) in versions
    assert toolchain.pick_version() == max(v for v in SUPPORTED_VERSIONS if v in versions)
    assert toolchain.fingerprint().startswith("tileiras release 13.")


def test_cuda_home_is_scrubbed(toolchain, monkeypatch, tmp_path):
    # an older toolkit under CUDA_HOME would make tileiras load the wrong libNVVM
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    monkeypatch.setenv("CUDA_PATH", str(tmp_path))
    monkeypatch.setenv("CUDA_ROOT", str(tmp_path))
    assert toolchain.compile(GOLDEN["vadd"]((13, 4)).encode(), "sm_80")[:4] == b"\x7fELF"


def test_bad_arguments(toolchain):
    with pytest.raises(ValueError):
        toolchain.compile(b"", arch="90")
    with pytest.raises(ValueError):
        toolchain.compile(b"", opt_level=7)


# --- finding the toolchain (no real tileiras needed) -----------------------------------------

def _fake_root(tmp_path: Path, nvvm=True, ptxas=True) -> Path:
    root = tmp_path / "cu13"
    (root / "bin").mkdir(parents=True)
    (root / "lib").mkdir()
    for name in ["tileiras", "tileirdisasm"] + (["ptxas"] if ptxas else []):
        f = root / "bin" / name
        f.write_text("#!/bin/sh\necho 13.3\necho 13.4\n")
        f.chmod(f.stat().st_mode | stat.S_IXUSR)
    if nvvm:
        (root / "lib" / "libnvvm.so.4").write_bytes(b"")
    return root


def test_env_override_is_used(tmp_path):
    root = _fake_root(tmp_path)
    tc = tileiras.find({"FEARLESS_TILEIRAS": str(root / "bin" / "tileiras"), "PATH": ""})
    assert tc.tileiras == (root / "bin" / "tileiras").resolve()
    assert tc.libnvvm.name == "libnvvm.so.4" and tc.ptxas.name == "ptxas"
    assert tc.versions() == ((13, 3), (13, 4))
    assert tc.pick_version() == (13, 4)


def test_missing_libnvvm_is_named(tmp_path):
    root = _fake_root(tmp_path, nvvm=False)
    with pytest.raises(BackendError) as info:
        tileiras.find({"FEARLESS_TILEIRAS": str(root / "bin" / "tileiras")})
    assert "no libNVVM" in str(info.value) and "pip install 'fearless[tile]'" in str(info.value)


def test_missing_ptxas_is_named(tmp_path):
    root = _fake_root(tmp_path, ptxas=False)
    with pytest.raises(BackendError) as info:
        tileiras.check(root / "bin" / "tileiras")
    assert "no ptxas" in str(info.value) and "pip install 'fearless[tile]'" in str(info.value)


def test_wrong_override_raises(tmp_path):
    with pytest.raises(BackendError, match="FEARLESS_TILEIRAS"):
        tileiras.find({"FEARLESS_TILEIRAS": str(tmp_path / "nope")})


def test_carried_bundle_is_found(tmp_path, monkeypatch):
    bundle = tmp_path / ".tiletc" / "root"
    bundle.parent.mkdir()
    os.rename(_fake_root(tmp_path), bundle)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tileiras, "_wheel_roots", list)
    tc = tileiras.find({"PATH": ""})
    assert tc is not None and tc.root == bundle.resolve()


def test_nothing_installed_is_none(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tileiras, "_wheel_roots", list)
    assert tileiras.find({"PATH": str(tmp_path)}) is None


def test_a_tileiras_crash_is_named(tmp_path):
    """tileiras 13.5 segfaults on some valid kernels (fuzz seed 2968: a load used inside an `if`
    after a `for` that carries a tile), printing nothing: the error said only "could not
    compile". It names the crash now."""
    root = _fake_root(tmp_path)
    (root / "bin" / "tileiras").write_text("#!/bin/sh\nkill -SEGV $$\n")
    tc = tileiras.check(root / "bin" / "tileiras")
    with pytest.raises(CompileError) as info:
        tc.compile(b"not read", "sm_90", kernel="k")
    assert "tileiras could not compile the Tile IR for sm_90:\ntileiras crashed (SIGSEGV)" in \
        str(info.value)


@pytest.mark.parametrize("shape", [(1,), (2, 1), (8,), (4, 4), (128,)])
@pytest.mark.parametrize("value", [True, False])
def test_bool_splats_read_back_as_one_value(toolchain, shape, value):
    """An i1 constant is bit-packed (MLIR's dense elements): a splat True written as the byte
    0x01 read back as [[true], [false]] for a (2, 1) tile, and the GPU computed with that."""
    from fearless.backends.tileir.tir import I1
    m = Module((13, 4))
    b = m.entry("k", []).builder()
    b.constant(value, tile(I1, shape))
    b.return_()
    text = toolchain.disasm(m.encode())
    want = "true" if value else "false"
    assert f"constant <i1: {want}> : tile<{'x'.join(map(str, shape))}xi1>" in text, text


def test_bool_constants_pack_one_bit_per_element(toolchain):
    from fearless.backends.tileir.tir import I1
    m = Module((13, 4))
    b = m.entry("k", []).builder()
    b.constant([[True], [False], [True], [True]], tile(I1, (4, 1)))
    b.constant([k % 3 == 0 for k in range(16)], tile(I1, (16,)))
    b.return_()
    text = toolchain.disasm(m.encode())
    assert "constant <i1: [[true], [false], [true], [true]]> : tile<4x1xi1>" in text, text
    assert ", ".join("true" if k % 3 == 0 else "false" for k in range(16)) in text, text
