"""What the compiler makes of every example: its PTX (SIMT) and Tile IR (tile), for refactors that
must not change the generated code (issue 11: "the generated PTX and Tile IR of every example are
unchanged or faster").

    PYTHONPATH=src:. python -m tests.snapshot DIR [--arch sm_90]    # write DIR/<kernel>.ptx ...
    PYTHONPATH=src:. python -m tests.snapshot --diff OLD NEW        # which files differ

Each example runs as ``fearless compile`` runs it (the cpu backend, no GPU needed, kernels compiled
for ``--arch`` and not run), with the disk cache off so that every kernel is compiled here. Files
are named by kernel, a digest of its specialisation and the arch, so one kernel launched with two
signatures gives two files. Tile kernels need tileiras (``pip install 'fearless[tile]'``).
"""
from __future__ import annotations

import argparse
import hashlib
import os
import runpy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def snapshot(out: Path, arch: str) -> int:
    """Write the PTX / Tile IR bytecode of every example's kernels under `out`; their number."""
    os.environ["FEARLESS_CACHE"] = "0"  # before fearless reads its configuration
    os.environ.setdefault("FEARLESS_PROGRESS", "0")
    import fearless as fl
    from fearless.runtime.ahead import compile_only

    fl.set_backend("cpu")
    out.mkdir(parents=True, exist_ok=True)
    written = 0
    for script in sorted((ROOT / "examples").glob("[!_]*.py")):
        sys.path.insert(0, str(script.parent))
        with compile_only([arch]) as made:
            runpy.run_path(str(script), run_name="__main__")
        for kernel, types, constants, made_arch, compiled in made:
            spec = repr((types, sorted(constants.items()))).encode()
            stem = f"{kernel.name}-{hashlib.sha256(spec).hexdigest()[:10]}-{made_arch}"
            if compiled.ptx is not None:
                (out / f"{stem}.ptx").write_text(compiled.ptx)
            if compiled.tileir is not None:
                (out / f"{stem}.tileirbc").write_bytes(compiled.tileir)
            (out / f"{stem}.txt").write_text(f"{script.name}: {kernel.name}{spec.decode()}\n")
            written += 1
    return written


def diff(old: Path, new: Path) -> list[str]:
    """Lines naming each file that is new, gone, or different between two snapshots."""
    names = sorted({p.name for p in old.iterdir()} | {p.name for p in new.iterdir()})
    lines = []
    for name in names:
        a, b = old / name, new / name
        if not a.exists() or not b.exists():
            lines.append(f"{'new ' if b.exists() else 'gone'}  {name}")
        elif a.read_bytes() != b.read_bytes():
            lines.append(f"diff  {name}")
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.snapshot",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("dirs", nargs="+", type=Path, help="DIR to write, or OLD NEW with --diff")
    p.add_argument("--diff", action="store_true", help="compare two snapshots")
    p.add_argument("--arch", default="sm_90")
    a = p.parse_args(argv)
    if a.diff:
        if len(a.dirs) != 2:
            p.error("--diff takes OLD NEW")
        lines = diff(*a.dirs)
        print("\n".join(lines) or "the same")
        return 1 if lines else 0
    if len(a.dirs) != 1:
        p.error("give one directory to write")
    print(f"{snapshot(a.dirs[0], a.arch)} kernels written to {a.dirs[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
