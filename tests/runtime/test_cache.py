"""The disk JIT cache: damaged entries are found and compiled again, never run; positions follow
the source; concurrent writers leave whole entries; slow compiles say so on stderr.

CPU tests build GPU entries through the cuda compile path (PTX and cubin need no GPU) and CPU
entries by running kernels; ``gpu`` tests damage a real kernel's cache and run it in a fresh
process on the GPU.
"""
from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import multiprocessing
import os
import pickle
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import fearless as fl
from fearless import f32
from fearless.config import Config
from fearless.errors import BackendError, CacheWarning
from fearless.ir import types as T
from fearless.runtime import cache, progress
from fearless.runtime.module import load_rebuilding, nvjitlink_version
from tests.support import import_source

KERNEL = sys.modules["fearless.kernel.base"]  # where the kernels read CONFIG
ROOT = Path(__file__).resolve().parents[2]

SOURCE = '''\
import fearless as fl
from fearless import f32


@fl.func
def scale(v, a):
    return v * a


@fl.func
def next_of(y, i):
    return y[i + 1]


@fl.kernel
def saxpy(a: f32, x: fl.Slice[f32], y: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = scale(x[i], a) + next_of(y, i)
'''
LINES = SOURCE.splitlines()
READ_LINE = LINES.index("    return y[i + 1]") + 1       # reads past the end when len(y) == n
DEF_LINE = LINES.index("def next_of(y, i):") + 1
CALL_LINE = LINES.index("        out[i] = scale(x[i], a) + next_of(y, i)") + 1
TYPES = (T.Scalar(fl.f32), T.Array(f32, 1, T.Access.READ, True),
         T.Array(f32, 1, T.Access.READ, True), T.Array(f32, 1, T.Access.DISJOINT, True))

needs_nvjitlink = pytest.mark.skipif(nvjitlink_version() == "unavailable",
                                     reason="nvJitLink builds the cubins")


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A fresh cache folder for both tracks, progress lines off, warnings of this process reset."""
    root = tmp_path / "cache"
    config = Config(None, root, True, frozenset(), progress=False)
    monkeypatch.setattr(KERNEL, "CONFIG", config)
    monkeypatch.setattr(cache, "_UNWRITABLE", set())
    return root


_loaded = 0


def _kernel(path: Path, text: str = SOURCE):
    """A new Kernel object for the source in ``path`` (as a fresh process would make one)."""
    global _loaded
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    _loaded += 1
    return import_source(path, f"cached_kernels_{_loaded}").saxpy


def _entries(root: Path) -> list[Path]:
    return sorted(root.rglob("*.entry"))


def _run_cpu(k, n: int = 300, seed: int = 1):
    """Launch ``k`` on the cpu backend; its result and NumPy's (float64) reference."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n + 1).astype(np.float32)
    out = fl.full(n, np.nan, f32)
    k[k.prepare(n)](1.5, fl.asarray(x), fl.asarray(y), out)
    return out.numpy(), 1.5 * x.astype(np.float64) + y[1:]


def _cache_warnings(record) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, CacheWarning)]


# the entry format --------------------------------------------------------------------------

def test_an_entry_round_trips_and_every_damage_is_found(tmp_path):
    disk = cache.DiskCache(tmp_path)
    sections = {"ptx": b".version 8.0", "cubin": bytes(range(256)) * 4, "pickle": b"\x80\x05."}
    disk.put("ab" * 32, sections)
    path = disk.path("ab" * 32)
    assert disk.get("ab" * 32) == sections
    whole = path.read_bytes()
    middle = len(whole) // 2
    damaged = {"truncated": whole[:middle], "empty": b"", "zeroed": bytes(len(whole)),
               "flipped": whole[:middle] + bytes([whole[middle] ^ 1]) + whole[middle + 1:],
               "appended": whole + b"\0"}
    for how, data in damaged.items():
        path.write_bytes(data)
        with pytest.warns(CacheWarning, match="damaged") as record:
            assert disk.get("ab" * 32) is None, how
        assert len(_cache_warnings(record)) == 1
        # at the caller's line, not inside fearless
        assert [w.filename for w in record if w.category is CacheWarning] == [__file__]
        assert not path.exists(), f"{how}: a damaged entry is deleted"


def test_a_section_table_that_lies_under_a_valid_digest_is_damage(tmp_path):
    disk = cache.DiskCache(tmp_path)
    body = json.dumps([["ptx", 10]]).encode() + b"\n" + b"short"
    path = disk.path("cd" * 32)
    path.parent.mkdir(parents=True)
    path.write_bytes(cache.MAGIC + hashlib.sha256(body).digest() + body)
    with pytest.warns(CacheWarning, match="section table"):
        assert disk.get("cd" * 32) is None


def test_loads_refuses_what_is_not_fearless_ir():
    evil = pickle.dumps(os.system)  # a pickle that names a function to call
    with pytest.raises(pickle.UnpicklingError, match="may not name"):
        cache.loads(evil, [])


def test_a_disabled_cache_reads_and_writes_nothing(tmp_path):
    disk = cache.DiskCache(tmp_path, enabled=False)
    disk.put("ef" * 32, {"ptx": b"x"})
    assert disk.get("ef" * 32) is None and not list(tmp_path.iterdir())


# SIMT kernels: damaged GPU entries ---------------------------------------------------------

def _flip_in_cubin(data: bytes, cubin: bytes) -> bytes:
    at = data.index(cubin) + len(cubin) // 2
    return data[:at] + bytes([data[at] ^ 0x10]) + data[at + 1:]


def _garbage_ptx(data: bytes, ptx: bytes) -> bytes:
    at = data.index(ptx)
    return data[:at] + b"garbage!" * (len(ptx) // 8) + data[at + len(ptx) // 8 * 8:]


DAMAGE = {
    "truncated": lambda data, c: data[:data.index(c.cubin) + len(c.cubin) // 2],
    "flipped byte in the cubin": lambda data, c: _flip_in_cubin(data, c.cubin),
    "zeroed": lambda data, c: bytes(len(data)),
    "garbage ptx": lambda data, c: _garbage_ptx(data, c.ptx.encode()),
    "garbage header": lambda data, c: data.replace(b'[["ptx"', b'{{"ptx"', 1),
}


@needs_nvjitlink
@pytest.mark.parametrize("how", list(DAMAGE))
def test_a_damaged_gpu_entry_warns_once_and_is_compiled_again(tmp_path, cache_dir, how):
    first = _kernel(tmp_path / "k.py").compile_for(TYPES, "cuda", "sm_90")
    (entry,) = _entries(cache_dir)
    entry.write_bytes(DAMAGE[how](entry.read_bytes(), first))
    with pytest.warns(CacheWarning) as record:
        again = _kernel(tmp_path / "k.py").compile_for(TYPES, "cuda", "sm_90")
    (message,) = _cache_warnings(record)
    assert "damaged" in message and entry.name in message
    assert not again.from_cache and again.ptx == first.ptx and again.cubin
    # the recompiled entry replaced the damaged one, and the next process reads it silently
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        hit = _kernel(tmp_path / "k.py").compile_for(TYPES, "cuda", "sm_90")
    assert hit.from_cache and hit.cubin == again.cubin and hit.ptx == first.ptx
    assert hit.info == first.info


@needs_nvjitlink
def test_an_entry_that_does_not_decode_is_compiled_again(tmp_path, cache_dir):
    first = _kernel(tmp_path / "k.py").compile_for(TYPES, "cuda", "sm_90")
    (entry,) = _entries(cache_dir)
    disk = cache.DiskCache(cache_dir)
    sections = disk.get(entry.stem)
    disk.put(entry.stem, {**sections, "pickle": b"not a pickle"})  # a valid digest over junk
    with pytest.warns(CacheWarning, match="does not decode"):
        again = _kernel(tmp_path / "k.py").compile_for(TYPES, "cuda", "sm_90")
    assert not again.from_cache and again.ptx == first.ptx


# cpu entries (the IR after the passes) -----------------------------------------------------

def test_the_cpu_backend_keeps_compiled_kernels_on_disk(tmp_path, cache_dir, monkeypatch):
    got, want = _run_cpu(_kernel(tmp_path / "k.py"))
    np.testing.assert_allclose(got, want, rtol=2e-7, atol=1e-6)
    assert len(_entries(cache_dir)) == 1
    monkeypatch.setattr(sys.modules["fearless.kernel.simt"], "compile_simt",
                        lambda *a, **k: pytest.fail("recompiled"))
    hit = _kernel(tmp_path / "k.py")
    got, want = _run_cpu(hit, seed=2)
    np.testing.assert_allclose(got, want, rtol=2e-7, atol=1e-6)
    assert all(c.from_cache for c in hit._compiled.values())


@pytest.mark.parametrize("how", ["truncated", "flipped", "zeroed"])
def test_a_damaged_cpu_entry_is_compiled_again_and_computes_right(tmp_path, cache_dir, how):
    _run_cpu(_kernel(tmp_path / "k.py"))
    (entry,) = _entries(cache_dir)
    data = entry.read_bytes()
    middle = len(data) // 2
    entry.write_bytes({"truncated": data[:middle], "zeroed": bytes(len(data)),
                       "flipped": data[:middle] + bytes([data[middle] ^ 4]) + data[middle + 1:],
                       }[how])
    with pytest.warns(CacheWarning, match="damaged") as record:
        got, want = _run_cpu(_kernel(tmp_path / "k.py"), seed=3)
    assert len(_cache_warnings(record)) == 1
    np.testing.assert_allclose(got, want, rtol=2e-7, atol=1e-6)
    assert cache.DiskCache(cache_dir).get(entry.stem) is not None  # whole again


def test_an_unwritable_cache_warns_once_and_still_computes(tmp_path, monkeypatch):
    blocker = tmp_path / "a file"
    blocker.write_text("the cache folder cannot be made under a file")
    config = Config(None, blocker / "cache", True, frozenset(), progress=False)
    monkeypatch.setattr(KERNEL, "CONFIG", config)
    monkeypatch.setattr(cache, "_UNWRITABLE", set())
    with pytest.warns(CacheWarning, match="cannot write the JIT cache") as record:
        for seed in (4, 5):  # two kernels, two misses, one warning
            got, want = _run_cpu(_kernel(tmp_path / "k.py"), seed=seed)
            np.testing.assert_allclose(got, want, rtol=2e-7, atol=1e-6)
    assert len(_cache_warnings(record)) == 1


def test_a_read_only_cache_folder_serves_its_entries(tmp_path, cache_dir, monkeypatch):
    _run_cpu(_kernel(tmp_path / "k.py"))
    folders = [cache_dir, *(p for p in cache_dir.rglob("*") if p.is_dir())]
    for folder in folders:
        folder.chmod(0o555)
    if os.geteuid() == 0:  # root writes anyway: fail writes as a read-only mount would

        def read_only(*args, **kwargs):
            raise OSError(errno.EROFS, "Read-only file system")

        monkeypatch.setattr(cache.tempfile, "mkstemp", read_only)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", CacheWarning)
            hit = _kernel(tmp_path / "k.py")
            got, want = _run_cpu(hit, seed=6)
        assert all(c.from_cache for c in hit._compiled.values())
        np.testing.assert_allclose(got, want, rtol=2e-7, atol=1e-6)
        with pytest.warns(CacheWarning, match="cannot write") as record:  # a miss is not kept
            other = _kernel(tmp_path / "k.py", SOURCE.replace("y[i + 1]", "y[i] + 1.0"))
            rng = np.random.default_rng(8)
            x, y = (rng.standard_normal(300).astype(np.float32) for _ in range(2))
            out = fl.full(300, np.nan, f32)
            other[other.prepare(300)](0.5, fl.asarray(x), fl.asarray(y), out)
        np.testing.assert_allclose(out.numpy(), 0.5 * x.astype(np.float64) + y + 1.0,
                                   rtol=2e-7, atol=1e-6)
        assert len(_cache_warnings(record)) == 1
    finally:
        for folder in folders:
            folder.chmod(0o755)


# positions: the current source's, never the cached one's -------------------------------------

def _bounds_site(compiled):
    (site,) = [span for name, span in compiled.info.bounds_sites if name == "y"]
    return site


def _chain(span) -> list:
    return [(c.function, c.defined, c.caller, c.at) for c in span.inlined]


@needs_nvjitlink
def test_cached_bounds_sites_point_at_the_current_source(tmp_path, cache_dir):
    path = tmp_path / "k.py"
    first = _bounds_site(_kernel(path).compile_for(TYPES, "cuda", "sm_90", prove=False))
    assert (first.filename, first.line) == (str(path), READ_LINE)
    assert _chain(first) == [("next_of", f"{path}:{DEF_LINE}", "kernel 'saxpy'",
                              f"{path}:{CALL_LINE}")]
    moved = "# two lines inserted\n# above the kernel\n" + SOURCE
    hit = _kernel(path, moved).compile_for(TYPES, "cuda", "sm_90", prove=False)
    assert hit.from_cache
    site = _bounds_site(hit)
    assert site.line == READ_LINE + 2 and site.text == "    return y[i + 1]"
    assert site.text[site.col:site.end_col] == "y[i + 1]"
    assert _chain(site) == [("next_of", f"{path}:{DEF_LINE + 2}", "kernel 'saxpy'",
                             f"{path}:{CALL_LINE + 2}")]
    head, functions = SOURCE.split("\n\n\n", 1)  # the same functions, indented by 4
    indented = f"{head}\n\nif True:\n{textwrap.indent(functions, '    ')}"
    hit = _kernel(path, indented).compile_for(TYPES, "cuda", "sm_90", prove=False)
    site = _bounds_site(hit)
    assert hit.from_cache and site.text[site.col:site.end_col] == "y[i + 1]"


def test_a_span_outside_the_kernel_is_not_stored(tmp_path):
    from fearless.frontend.spans import Span
    anchors = [cache.Anchor(str(tmp_path / "k.py"), 3, 9, 4, 0)]
    with pytest.raises(cache.Unplaceable):
        cache.dumps(Span(str(tmp_path / "other.py"), 5, 0, 1, "x"), anchors)
    with pytest.raises(cache.Unplaceable):
        cache.dumps(Span(str(tmp_path / "k.py"), 12, 0, 1, "x"), anchors)


BOUNDS_SCRIPT = '''\
import json, sys
import numpy as np
import fearless as fl
from fearless.errors import KernelBoundsError
from tests.support import import_source
k = import_source(sys.argv[1], "kernels").saxpy
n = 64
x, y = fl.asarray(np.ones(n, np.float32)), fl.asarray(np.ones(n, np.float32))
out = fl.full(n, np.nan, fl.f32)
try:
    k[k.prepare(n)](2.0, x, y, out)
    fl.synchronize()
    print(json.dumps({"error": None}))
except KernelBoundsError as exc:
    cached = sorted(c.from_cache for c in k._compiled.values())
    print(json.dumps({"error": str(exc).replace(sys.argv[1], "k.py"), "line": exc.span.line,
                      "text": exc.span.text, "cached": cached}))
'''


def _bounds_run(tmp_path, cache_dir, backend: str, source: str) -> dict:
    (tmp_path / "k.py").write_text(source)
    script = tmp_path / "bounds.py"
    script.write_text(BOUNDS_SCRIPT)
    env = {**os.environ, "FEARLESS_CACHE_DIR": str(cache_dir), "FEARLESS_BACKEND": backend,
           "FEARLESS_PROGRESS": "0", "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "k.py")], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def _check_bounds_follow_the_source(tmp_path, backend: str):
    cache_dir = tmp_path / "cache"
    for shift in (0, 2):  # then two lines inserted above, in a fresh process
        got = _bounds_run(tmp_path, cache_dir, backend, "# inserted\n" * shift + SOURCE)
        assert got["line"] == READ_LINE + shift and got["text"] == "    return y[i + 1]"
        assert f"k.py:{READ_LINE + shift}:12\n" in got["error"]
        assert f"in device function 'next_of' (k.py:{DEF_LINE + shift})" in got["error"]
        assert f"called from kernel 'saxpy' (k.py:{CALL_LINE + shift})" in got["error"]
        assert all(got["cached"]) == bool(shift), "the second process read the disk cache"


def test_a_bounds_error_from_a_cached_cpu_kernel_names_the_current_line(tmp_path):
    _check_bounds_follow_the_source(tmp_path, "cpu")


@pytest.mark.gpu
def test_a_bounds_error_from_a_cached_gpu_kernel_names_the_current_line(tmp_path):
    _check_bounds_follow_the_source(tmp_path, "cuda")


# concurrency ---------------------------------------------------------------------------------

def _writer(path: str, root: str, barrier, results) -> None:
    """One of the processes racing on one key: compile (GPU and CPU entries), run, rewrite."""
    KERNEL.CONFIG = Config(None, Path(root), True, frozenset(), progress=False)
    warnings.simplefilter("error", CacheWarning)
    k = import_source(Path(path), "raced").saxpy
    fl.set_backend("cpu")
    barrier.wait()
    ptx = k.compile_for(TYPES, "cuda", "sm_90").ptx if nvjitlink_version() != "unavailable" \
        else ""
    got, want = _run_cpu(k, seed=os.getpid() % 1000)
    disk = cache.DiskCache(Path(root))
    for entry in sorted(Path(root).rglob("*.entry")) * 10:  # rewrite while the others read
        sections = disk.get(entry.stem)
        assert sections is not None
        disk.put(entry.stem, sections)
    results.put((hashlib.sha256(ptx.encode()).hexdigest(), float(np.max(np.abs(got - want)))))


def test_eight_processes_writing_one_key_leave_a_whole_entry(tmp_path, cache_dir):
    path = tmp_path / "k.py"
    path.write_text(SOURCE)
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(8), ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(str(path), str(cache_dir), barrier, results))
             for _ in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=600)
    assert [p.exitcode for p in procs] == [0] * 8
    got = [results.get(timeout=10) for _ in procs]
    assert len({ptx for ptx, _ in got}) == 1 and max(err for _, err in got) < 1e-5
    entries = _entries(cache_dir)  # the cuda and the cpu compile, each whole
    assert len(entries) >= 2 and all(cache.DiskCache(cache_dir).get(e.stem) for e in entries)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        k = _kernel(path)
        got, want = _run_cpu(k, seed=7)
    assert all(c.from_cache for c in k._compiled.values())
    np.testing.assert_allclose(got, want, rtol=2e-7, atol=1e-6)


# a cubin the driver refuses ------------------------------------------------------------------

@dataclasses.dataclass
class _Code:
    name: str
    from_cache: bool


def test_cached_code_the_driver_refuses_is_compiled_once_more():
    tried = []

    def load_one(code):
        tried.append(code.name)
        if code.name == "cached":
            raise BackendError("no kernel image is available for execution on the device")
        return "loaded"

    with pytest.warns(CacheWarning, match="refused the code in the JIT cache") as record:
        compiled, loaded = load_rebuilding("k", _Code("cached", True),
                                           lambda: _Code("fresh", False), load_one)
    assert (compiled.name, loaded, tried) == ("fresh", "loaded", ["cached", "fresh"])
    assert len(_cache_warnings(record)) == 1


def test_fresh_code_the_driver_refuses_is_an_error_at_once():
    def refuse(code):
        raise BackendError(f"refused {code.name}")

    with pytest.raises(BackendError, match="refused fresh"):
        load_rebuilding("k", _Code("fresh", False), lambda: pytest.fail("rebuilt"), refuse)
    with pytest.warns(CacheWarning), pytest.raises(BackendError, match="refused again"):
        load_rebuilding("k", _Code("cached", True), lambda: _Code("again", False), refuse)


# tile kernels ---------------------------------------------------------------------------------

TILE_SOURCE = '''\
import fearless as fl
from fearless import tile as ft, f32


@ft.kernel
def twice(z: ft.Out[f32], x: ft.In[f32]):
    z.store(ft.load_like(x, z) * 2.0 + 1.0)
'''


def _tile_kernel(path: Path):
    global _loaded
    path.write_text(TILE_SOURCE)
    _loaded += 1
    return import_source(path, f"cached_tiles_{_loaded}").twice


def _tile_run(k, n: int = 3000, seed: int = 0):
    x = np.random.default_rng(seed).standard_normal(n).astype(np.float32)
    z, _ = k(fl.full(n, np.nan, f32).partition(1024), fl.asarray(x)).sync()
    return z.unpartition().numpy(), x.astype(np.float64) * 2.0 + 1.0


def test_tile_kernels_keep_cpu_compiles_on_disk(tmp_path, cache_dir):
    got, want = _tile_run(_tile_kernel(tmp_path / "t.py"))
    np.testing.assert_allclose(got, want, rtol=2e-7)
    (entry,) = _entries(cache_dir)
    entry.write_bytes(entry.read_bytes()[:-7])
    with pytest.warns(CacheWarning, match="damaged"):
        got, want = _tile_run(_tile_kernel(tmp_path / "t.py"), seed=1)
    np.testing.assert_allclose(got, want, rtol=2e-7)
    hit = _tile_kernel(tmp_path / "t.py")
    got, want = _tile_run(hit, seed=2)
    np.testing.assert_allclose(got, want, rtol=2e-7)
    assert all(c.from_cache for c in hit._compiled.values())


def _tileiras():
    from fearless.backends.tileir import tileiras
    return tileiras.find()


@pytest.mark.skipif(_tileiras() is None, reason="needs tileiras")
@pytest.mark.parametrize("how", ["truncated", "flipped", "zeroed"])
def test_a_damaged_tile_cubin_is_compiled_again(tmp_path, cache_dir, how):
    from fearless.runtime.ahead import compile_only
    with compile_only(["sm_90"]) as made:
        _tile_run(_tile_kernel(tmp_path / "t.py"))
    (_, _, _, _, first), = made
    (entry,) = _entries(cache_dir)
    data = entry.read_bytes()
    at = data.index(first.cubin) + len(first.cubin) // 2
    entry.write_bytes({"truncated": data[:at], "zeroed": bytes(len(data)),
                       "flipped": data[:at] + bytes([data[at] ^ 1]) + data[at + 1:]}[how])
    with pytest.warns(CacheWarning, match="damaged"), compile_only(["sm_90"]) as made:
        _tile_run(_tile_kernel(tmp_path / "t.py"))
    (_, _, _, _, again), = made
    assert not again.from_cache and again.cubin
    assert cache.DiskCache(cache_dir).get(entry.stem)["cubin"] == again.cubin


# progress -------------------------------------------------------------------------------------

def test_a_fast_compile_prints_nothing(capsys):
    with progress.compiling("kernel 'k'", threshold=0.5):
        pass
    assert capsys.readouterr().err == ""


def test_a_slow_compile_says_so_while_it_runs_and_when_it_ends(capsys):
    with progress.compiling("kernel 'k' (f32) for cpu", threshold=0.05):
        time.sleep(0.5)
        assert capsys.readouterr().err == "fearless: compiling kernel 'k' (f32) for cpu ..."
    end = capsys.readouterr().err
    assert end.startswith(" done in ") and end.endswith(" s\n")
    with pytest.raises(ValueError), progress.compiling("kernel 'k'", threshold=0.0):
        raise ValueError("a compile error")
    assert capsys.readouterr().err.endswith(" failed after 0.0 s\n")
    with progress.compiling("kernel 'k'", enabled=False, threshold=0.0):
        time.sleep(0.01)
    assert capsys.readouterr().err == ""


def test_a_kernel_compile_names_the_kernel_and_can_be_silenced(tmp_path, cache_dir, monkeypatch,
                                                             capsys):
    monkeypatch.setattr(progress, "THRESHOLD", 0.0)
    monkeypatch.setattr(KERNEL, "CONFIG", dataclasses.replace(KERNEL.CONFIG, progress=True))
    _run_cpu(_kernel(tmp_path / "k.py"))
    err = capsys.readouterr().err
    assert err.startswith("fearless: compiling kernel 'saxpy' (f32, array<f32, 1d, read>") \
        and " for cpu ... done in " in err and err.count("\n") == 1
    monkeypatch.setattr(KERNEL, "CONFIG", dataclasses.replace(KERNEL.CONFIG, progress=False,
                                                              disk_cache=False))
    _run_cpu(_kernel(tmp_path / "k.py"))
    assert capsys.readouterr().err == ""


# on the GPU: a damaged cache never crashes and never computes wrong values -------------------

GPU_SCRIPT = '''\
import sys
import numpy as np
import fearless as fl
from tests.support import import_source
mod = import_source(sys.argv[1], "kernels")
rng = np.random.default_rng(11)
if hasattr(mod, "saxpy"):
    k, n = mod.saxpy, 100_000
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n + 1).astype(np.float32)
    out = fl.full(n, np.nan, fl.f32)
    k[k.prepare(n)](1.5, fl.asarray(x), fl.asarray(y), out)
    got, want = out.numpy(), 1.5 * x.astype(np.float64) + y[1:]
else:
    n = 100_000
    x = rng.standard_normal(n).astype(np.float32)
    z, _ = mod.twice(fl.full(n, np.nan, fl.f32).partition(1024), fl.asarray(x)).sync()
    got, want = z.unpartition().numpy(), x.astype(np.float64) * 2.0 + 1.0
err = float(np.max(np.abs(got - want) / (np.abs(want) + 1)))
print("max relative error", err)
sys.exit(0 if err < 1e-6 else 3)
'''


def _gpu_run(tmp_path, source: str):
    kernel_file, script = tmp_path / "kernels.py", tmp_path / "run.py"
    kernel_file.write_text(source)
    script.write_text(GPU_SCRIPT)
    env = {**os.environ, "FEARLESS_CACHE_DIR": str(tmp_path / "cache"),
           "FEARLESS_BACKEND": "cuda", "FEARLESS_PROGRESS": "0",
           "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    return subprocess.run([sys.executable, str(script), str(kernel_file)], env=env,
                          capture_output=True, text=True, timeout=300)


def _other_arch_cubin(tmp_path, source: str) -> bytes:
    """The same kernel compiled for sm_80: valid, whole, and refused by an sm_90 driver."""
    path = tmp_path / "other_arch.py"
    path.write_text(source)
    mod = import_source(path, f"other_arch_{time.time_ns()}")
    if hasattr(mod, "saxpy"):
        return mod.saxpy.compile_for(TYPES, "cuda", "sm_80").cubin
    from fearless.runtime.ahead import compile_only
    with compile_only(["sm_80"]) as made:
        mod.twice(fl.zeros(100_000).partition(1024), fl.ones(100_000)).sync()
    return made[0][-1].cubin


@pytest.mark.gpu
@pytest.mark.parametrize("source", [SOURCE, TILE_SOURCE], ids=["simt", "tile"])
@pytest.mark.parametrize("how", ["truncated", "flipped", "zeroed", "refused by the driver"])
def test_a_damaged_gpu_cache_never_crashes_or_computes_wrong(tmp_path, source, how):
    if source is TILE_SOURCE and _tileiras() is None:
        pytest.skip("tile kernels compile with tileiras")
    first = _gpu_run(tmp_path, source)
    assert first.returncode == 0, first.stdout + first.stderr
    entries = _entries(tmp_path / "cache")
    assert entries
    disk = cache.DiskCache(tmp_path / "cache")
    for entry in entries:
        data = entry.read_bytes()
        cubin = disk.get(entry.stem)["cubin"]
        at = data.index(cubin) + len(cubin) // 2
        if how == "refused by the driver":
            disk.put(entry.stem, {**disk.get(entry.stem),
                                  "cubin": _other_arch_cubin(tmp_path, source)})
            continue
        entry.write_bytes({"truncated": data[:at], "zeroed": bytes(len(data)),
                           "flipped": data[:at] + bytes([data[at] ^ 1]) + data[at + 1:]}[how])
    again = _gpu_run(tmp_path, source)
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stderr.count("CacheWarning") == len(entries), again.stderr
    assert ("refused" if how.startswith("refused") else "damaged") in again.stderr
    third = _gpu_run(tmp_path, source)  # the entries were replaced: silent and right
    assert third.returncode == 0 and "CacheWarning" not in third.stderr, third.stderr
