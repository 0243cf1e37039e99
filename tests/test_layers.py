"""Code-shape rules that keep fearless maintainable (STYLE.md): layering, size, docstrings.

* imports point downward only, through the ranks below (function-level imports count too);
* only runtime/ imports cuda.core / cuda.bindings, only backends/llvm/ imports llvmlite;
* no module over 800 lines; every module opens with a docstring;
* pyproject's explicit package list names every package under src/.
"""
from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "fearless"
RANKS = [  # (module prefix, rank); the longest matching prefix wins
    ("fearless.frontend.spans", 0), ("fearless.version", 0), ("fearless.errors", 1),
    ("fearless.dtypes", 2), ("fearless.config", 2), ("fearless.tracebacks", 2),
    ("fearless.observe", 2),
    ("fearless.compiler.abi", 3), ("fearless.compiler.info", 3), ("fearless.simt", 3), ("fearless.tile.lang", 3), ("fearless.tile.views", 3),
    ("fearless.math", 3),
    ("fearless.ir", 4), ("fearless.frontend", 5), ("fearless.analysis", 6),
    ("fearless.passes", 7), ("fearless.backends", 8), ("fearless.runtime", 9),
    ("fearless.compiler", 10), ("fearless.kernel", 11),
    ("fearless.doctor", 12), ("fearless", 13), ("fearless.tile", 13), ("fearless.examples", 13),
    ("fearless.demo", 14), ("fearless.models", 14), ("fearless.cli", 15), ("fearless.__main__", 15),
]
MAX_LINES = 800


def rank(module: str) -> int:
    best = max((p for p, _ in RANKS if module == p or module.startswith(p + ".")), key=len)
    return dict(RANKS)[best]


def modules():
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC.parent).with_suffix("")
        name = ".".join(rel.parts).removesuffix(".__init__")
        yield name, path


def imports(path: Path, module: str):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            base = node.module
            if node.level:
                parent = module.split(".")[:-node.level] if not path.name == "__init__.py" \
                    else module.split(".")[:len(module.split(".")) - node.level + 1]
                base = ".".join(parent + [node.module])
            yield base
            yield from (f"{base}.{a.name}" for a in node.names)


def test_imports_point_downward():
    bad = []
    for name, path in modules():
        for target in imports(path, name):
            if target.startswith("fearless") and target != "fearless" and \
                    rank(_existing(target)) > rank(name):
                bad.append(f"{name} (rank {rank(name)}) imports {target}")
    assert not bad, "\n".join(bad)


def _existing(target: str) -> str:
    parts = target.split(".")
    while parts and not ((SRC.parent / Path(*parts)).with_suffix(".py").exists()
                         or (SRC.parent / Path(*parts)).is_dir()):
        parts.pop()
    return ".".join(parts)


def test_driver_and_llvm_imports_stay_in_their_layers():
    for name, path in modules():
        for target in imports(path, name):
            if target.startswith(("cuda.core", "cuda.bindings")):
                assert name.startswith("fearless.runtime"), f"{name} imports {target}"
            if target.startswith("llvmlite"):
                assert name.startswith("fearless.backends.llvm"), f"{name} imports {target}"


def test_modules_are_small_and_documented():
    for name, path in modules():
        lines = path.read_text().splitlines()
        assert len(lines) <= MAX_LINES, f"{name} has {len(lines)} lines (budget {MAX_LINES})"
        assert ast.get_docstring(ast.parse(path.read_text())), f"{name} has no docstring"


def test_every_package_is_listed_in_pyproject():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
                 ["packages"])
    found = {name for name, path in modules() if path.name == "__init__.py"}
    assert found | {"fearless.examples"} == listed


def test_readme_test_command_is_what_ci_runs():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    commands = re.findall(r"```(?:sh|bash)\n(.*?)```", readme, re.S)
    test_cmd = next(line for block in commands for line in block.splitlines()
                    if "pytest" in line)
    assert test_cmd.strip() in ci


# The runtime launches what the compiler hands it (compiler/info.py, compiler/abi.py) and never
# reads the IR or a backend; the cpu backend's interpreters reach it from the kernel layer.
def test_the_runtime_imports_neither_the_ir_nor_the_backends():
    bad = []
    for name, path in modules():
        if not name.startswith("fearless.runtime"):
            continue
        for target in imports(path, name):
            module = _existing(target)
            if module.startswith(("fearless.ir", "fearless.backends")):
                bad.append(f"{name} imports {target}")
    assert not bad, "\n".join(bad)
