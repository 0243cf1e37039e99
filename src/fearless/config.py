"""The one place FEARLESS_* environment variables are read.

``Config.from_env()`` runs once at import of the runtime; everything else receives the Config (or
reads ``fearless.config.CONFIG``) rather than looking at ``os.environ`` itself.

Variables:
    FEARLESS_BACKEND    ``cpu`` or ``cuda``; unset picks cuda when a usable GPU is present.
    FEARLESS_CACHE_DIR  JIT cache directory; default ``$XDG_CACHE_HOME/fearless`` (``~/.cache``).
    FEARLESS_CACHE      ``0`` disables the on-disk JIT cache (the in-memory one stays).
    FEARLESS_DUMP       comma list of stages to print while compiling: ``ir,llvm,ptx``.
    FEARLESS_RACECHECK  ``1`` runs the cpu backend's race detector on shared memory, UnsafeSlice
                        and atomic arrays (raises RaceError); default ``0``.
    FEARLESS_TRACEBACK  ``1`` keeps fearless's own frames in the tracebacks of user errors
                        (``tracebacks.py`` removes them by default).
    FEARLESS_PROGRESS   ``0`` silences the line on stderr that a compile taking more than a
                        second prints (``fearless: compiling kernel 'k' ... done in 6.2 s``).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Config:
    backend: str | None
    cache_dir: Path
    disk_cache: bool
    dump: frozenset[str]
    racecheck: bool = False
    full_traceback: bool = False
    progress: bool = True

    @staticmethod
    def from_env(env=None) -> "Config":
        env = os.environ if env is None else env
        backend = env.get("FEARLESS_BACKEND") or None
        if backend is not None and backend not in ("cpu", "cuda"):
            raise ValueError(f"FEARLESS_BACKEND={backend!r}: expected 'cpu' or 'cuda'")
        xdg = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        cache_dir = Path(env.get("FEARLESS_CACHE_DIR") or Path(xdg) / "fearless")
        dump = frozenset(s.strip() for s in env.get("FEARLESS_DUMP", "").split(",") if s.strip())
        return Config(backend=backend, cache_dir=cache_dir,
                      disk_cache=env.get("FEARLESS_CACHE", "1") != "0", dump=dump,
                      racecheck=env.get("FEARLESS_RACECHECK", "0") not in ("", "0"),
                      full_traceback=env.get("FEARLESS_TRACEBACK", "0") not in ("", "0"),
                      progress=env.get("FEARLESS_PROGRESS", "1") != "0")


CONFIG = Config.from_env()
