"""The on-disk JIT cache: compiled kernels keyed by everything that can change the machine code.

An entry is the PTX, the cubin (when one was built) and a small JSON of facts the runtime needs
without recompiling (index space, bounds-check sites). Keys are SHA-256 digests of the kernel's
source, the source of every device function it calls, its compile-time constants, the argument
specialisation, the target arch, the options and the versions of fearless, LLVM and nvJitLink.
Writes go to a temporary file renamed into place, so concurrent processes never read half an
entry. The in-memory cache lives on each Kernel object.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from pathlib import Path

FORMAT = "v1"


@functools.lru_cache(maxsize=1)
def compiler_fingerprint() -> str:
    """A digest of fearless's own Python sources, part of every disk-cache key: a changed
    compiler (a new pass, a fixed proof) never reuses what an older one cached under the same
    version number. Read once per process (a few milliseconds)."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def digest(parts) -> str:
    h = hashlib.sha256()
    for part in parts:
        data = part if isinstance(part, bytes) else str(part).encode()
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


class DiskCache:
    """``get(key)`` / ``put(key, ptx, cubin, meta)`` under ``root/v1``; disabled -> no-ops."""

    def __init__(self, root: Path, enabled: bool = True):
        self.root = Path(root) / FORMAT
        self.enabled = enabled

    def _paths(self, key: str):
        folder = self.root / key[:2]
        return folder, folder / f"{key}.ptx", folder / f"{key}.cubin", folder / f"{key}.json"

    def get(self, key: str):
        """``(ptx, cubin or None, meta)`` or None on a miss (or a damaged entry)."""
        if not self.enabled:
            return None
        _, ptx_path, cubin_path, meta_path = self._paths(key)
        try:
            meta = json.loads(meta_path.read_text())
            ptx = ptx_path.read_text()
            cubin = cubin_path.read_bytes() if meta.get("has_cubin") else None
        except (OSError, ValueError):
            return None
        return ptx, cubin, meta

    def put(self, key: str, ptx: str, cubin: bytes | None, meta: dict) -> None:
        if not self.enabled:
            return
        folder, ptx_path, cubin_path, meta_path = self._paths(key)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            self._write(ptx_path, ptx.encode())
            if cubin is not None:
                self._write(cubin_path, cubin)
            self._write(meta_path, json.dumps({**meta, "has_cubin": cubin is not None}).encode())
        except OSError:
            pass  # a read-only or full cache directory only costs a recompile

    @staticmethod
    def _write(path: Path, data: bytes) -> None:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
