"""Where ``ft.autotune`` and ``fl.autotune`` keep their rankings on disk:
``FEARLESS_CACHE_DIR/autotune/``, one JSON file per kernel (its source fingerprint, and a tile
kernel's hints), each key's timed configs (fastest first)
with the config list they were chosen from. ``fearless tune`` writes here ahead of time and calls
read it; a damaged or foreign entry reads as none (the key tunes again)."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from fearless.kernel import base
from fearless.runtime import cache


class Store:
    """The rankings of one autotuned kernel (``driver.Tuned``) and config list."""

    def __init__(self, tuned):
        self.configs = [repr(c) for c in tuned.configs]
        fingerprint = cache.digest(["autotune", *tuned.kernel.fingerprint(),
                                    *tuned.kernel._key_parts()])
        self.path = Path(base.CONFIG.cache_dir) / "autotune" / f"{fingerprint}.json"
        self.enabled = base.CONFIG.disk_cache

    def _read(self) -> dict:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def get(self, key: str) -> list | None:
        """The ranking (config indices, fastest first) stored for ``key``, or None."""
        if not self.enabled:
            return None
        entry = self._read().get(key)
        if not isinstance(entry, dict) or entry.get("configs") != self.configs:
            return None
        ranking = entry.get("ranking")
        if not isinstance(ranking, list) or not ranking or not all(
                type(n) is int and 0 <= n < len(self.configs) for n in ranking):
            return None
        return ranking

    def put(self, key: str, ranking: list) -> None:
        if not self.enabled:
            return
        data = self._read()
        data[key] = {"ranking": ranking, "configs": self.configs}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, indent=1)
            os.replace(tmp, self.path)
        except OSError:
            pass   # a read-only cache: tune again in the next process
