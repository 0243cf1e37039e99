"""The public surface as users and their tools see it: help(), inspect.signature(), import *,
type checkers.

Every intrinsic of the kernel languages (``fl.thread.index_1d``, ``fl.warp.reduce_sum``,
``ft.load``...) has its own docstring and its real signature; kernel and device-function objects
present themselves as the user's function; ``from fearless import *`` replaces no builtin; and,
where pyright is installed, the README's kernels type-check.
"""
from __future__ import annotations

import builtins
import importlib.metadata
import inspect
import json
import pydoc
import re
import shutil
import subprocess
import sys
import tomllib
import traceback
import types
from pathlib import Path

import pytest

import fearless as fl
from fearless import tile as ft
from fearless.errors import CompileError
from fearless.frontend import intrinsics, mma, tile_intrinsics, warps
from fearless.simt import asynccopy, shared, static, thread, warp
from fearless.simt import mma as simt_mma
from fearless.tile import lang

ROOT = Path(__file__).resolve().parent.parent
STUB_MODULES = (thread, shared, warp, simt_mma, asynccopy, static, lang, fl.math)


def _public_functions(module):
    return {name: obj for name, obj in vars(module).items()
            if not name.startswith("_") and isinstance(obj, types.FunctionType)
            and obj.__module__ == module.__name__}


def _intrinsics():
    """Every function the compilers recognise by identity, from the user-facing modules."""
    known = {*intrinsics.HANDLERS, *warps.HANDLERS, *mma.HANDLERS, *tile_intrinsics.HANDLERS,
             static.static_range,  # and the math functions, which the ops' user names map
             *(f for f in vars(fl.math).values() if id(f) in intrinsics._MATH_BY_OBJECT)}
    return sorted((f for f in known if getattr(f, "__module__", "").startswith(
        ("fearless.simt", "fearless.tile", "fearless.math"))),
        key=lambda f: (f.__module__, f.__name__))


INTRINSICS = _intrinsics()


def test_the_stub_modules_hold_only_intrinsics():
    # the list below is complete: a new public function must be one the compiler knows
    found = {f for m in STUB_MODULES for f in _public_functions(m).values()}
    assert found == set(INTRINSICS) - {fl.unsafe}
    assert len(INTRINSICS) > 50


@pytest.mark.parametrize("fn", INTRINSICS, ids=lambda f: f"{f.__module__}.{f.__name__}")
def test_every_intrinsic_has_its_own_docstring_and_signature(fn):
    module = sys.modules[fn.__module__]
    doc = inspect.getdoc(fn)
    assert doc and doc != inspect.getdoc(module) and len(doc) > 30
    others = [g for g in INTRINSICS if g is not fn and inspect.getdoc(g) == doc]
    assert not others, f"shares its docstring with {others}"
    params = inspect.signature(fn).parameters.values()
    assert not any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params), \
        inspect.signature(fn)
    text = pydoc.render_doc(fn, renderer=pydoc.plaintext)
    assert f"{fn.__name__}(" in text and doc.splitlines()[0] in text


def test_signatures_name_the_keywords_the_compiler_takes():
    sig = {f: list(inspect.signature(f).parameters) for f in INTRINSICS}
    assert sig[fl.warp.shuffle] == ["value", "src_lane", "mask", "width"]
    assert sig[fl.warp.shuffle_xor] == ["value", "lane_mask", "mask", "width"]
    assert sig[fl.mma.ldmatrix] == ["shared", "index", "count", "trans"]
    assert sig[fl.async_copy] == ["dst", "slot", "src", "index", "size", "cache"]
    assert sig[ft.load] == ["x", "index", "shape", "latency", "allow_tma", "padding"]
    assert sig[ft.load_like] == ["x", "out", "latency", "allow_tma", "padding"]
    assert sig[ft.gather] == ["x", "indices", "padding"]
    assert sig[ft.scatter] == ["out", "indices", "values"]
    assert sig[ft.sum][:3] == ["t", "axis", "keepdims"]
    assert inspect.signature(fl.warp.reduce_sum).parameters["mask"].default == fl.warp.FULL


@pytest.mark.parametrize("fn, text", [
    (fl.thread.index_1d, "fearless.thread.index_1d() can only be called inside a "
                         "@fearless.kernel or @fearless.func"),
    (fl.warp.reduce_sum, "fearless.warp.reduce_sum() can only be called inside"),
    (fl.shared.array, "fearless.shared.array() can only be called inside"),
    (fl.async_wait, "fearless.async_wait() can only be called inside"),
    (ft.load, "fearless.tile.load() can only be called inside a @fearless.tile.kernel"),
    (fl.math.erfinv, "fearless.math.erfinv() can only be called inside a @fearless.kernel, "
                     "@fearless.tile.kernel or @fearless.func"),
])
def test_an_intrinsic_called_on_the_host_says_where_it_belongs(fn, text):
    with pytest.raises(CompileError, match=re.escape(text)) as info:
        fn(1, 2)
    frames = traceback.extract_tb(info.value.__traceback__)
    assert [f.filename for f in frames] == [__file__]  # the caller's frame only


def _user_function(x: fl.Slice[fl.f32], out: fl.DisjointSlice[fl.f32], scale: float):
    """Scales x into out."""
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = scale * x[i]


def _user_tile(z: ft.Out[fl.f32], x: ft.In[fl.f32]):
    """Doubles x."""
    z.store(ft.load_like(x, z) * 2.0)


def _user_helper(a, b=1.0):
    """Adds."""
    return a + b


@pytest.mark.parametrize("make, fn", [
    (fl.kernel, _user_function),
    (lambda f: fl.kernel(unchecked=True)(f), _user_function),
    (lambda f: fl.unchecked(fl.kernel(f)), _user_function),
    (ft.kernel, _user_tile),
    (fl.func, _user_helper),
])
def test_kernels_and_device_functions_present_the_users_function(make, fn):
    obj = make(fn)
    assert obj.__wrapped__ is fn
    assert obj.__doc__ == fn.__doc__
    assert obj.__name__ == fn.__name__ and obj.__qualname__ == fn.__qualname__
    assert obj.__module__ == __name__
    assert inspect.signature(obj) == inspect.signature(fn)
    assert "(*args, **kwargs)" not in str(inspect.signature(obj))


def test_kernels_still_compile_and_run_after_wrapping():
    import numpy as np
    k = fl.kernel(_user_function)
    x = np.random.default_rng(3).standard_normal(100).astype(np.float32)
    out = fl.full(100, np.nan, fl.f32)
    k[k.prepare(100)](fl.asarray(x), out, 3.0)
    np.testing.assert_allclose(out.numpy(), 3.0 * x.astype(np.float64), rtol=1e-6)


@pytest.mark.parametrize("module", [fl, ft, thread, shared, warp, simt_mma, asynccopy, static])
def test_import_star_replaces_no_builtin(module):
    names = set(module.__all__)
    assert not names & set(dir(builtins)), sorted(names & set(dir(builtins)))
    assert all(hasattr(module, n) for n in names)
    namespace: dict = {}
    exec(f"from {module.__name__} import *", namespace)
    assert not set(namespace) & (set(dir(builtins)) - {"__builtins__"})


def test_builtin_named_functions_stay_reachable_by_attribute():
    assert fl.zip.__module__ == "fearless.runtime.lazy"
    assert {ft.sum.__name__, ft.max.__name__, ft.min.__name__} == {"sum", "max", "min"}
    assert fl.warp.any.__name__ == "any" and fl.warp.all.__name__ == "all"


def test_the_package_ships_its_type_information():
    import tomllib
    assert (ROOT / "src" / "fearless" / "py.typed").is_file()
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "py.typed" in config["tool"]["setuptools"]["package-data"]["fearless"]


def _readme_kernel_blocks():
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    return [b for b in blocks if "@fl.kernel" in b or "@ft.kernel" in b or "fl.warp." in b]


@pytest.mark.skipif(shutil.which("pyright") is None, reason="pyright is not installed")
def test_pyright_accepts_the_readme_kernels_and_launches(tmp_path):
    blocks = _readme_kernel_blocks()
    assert len(blocks) >= 5
    header = "import numpy as np\nimport fearless as fl\nfrom fearless import tile as ft, f16, f32\n\n"
    for k, block in enumerate(blocks):
        (tmp_path / f"block{k}.py").write_text(header + block)
    # fragments use names defined in the prose around them (x, i, rows...): only those may
    # be undefined; attributes, calls, annotations and arguments are all checked
    (tmp_path / "pyrightconfig.json").write_text(json.dumps({
        "extraPaths": [str(ROOT / "src")], "pythonVersion": "3.11",
        "reportUndefinedVariable": "none"}))
    run = subprocess.run(["pyright", "--pythonpath", sys.executable, str(tmp_path)],
                         capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_version_is_written_once():
    """src/fearless/version.py: pyproject.toml reads it, the package and the cache keys use it."""
    project = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml")
                            .read_text())["project"]
    assert "version" not in project and "version" in project["dynamic"]
    assert fl.__version__ == importlib.metadata.version("fearless")
    assert sys.modules["fearless.kernel.base"].VERSION is fl.__version__
