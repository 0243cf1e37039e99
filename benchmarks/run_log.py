"""What the benchmark scripts share: a log that goes to the terminal and ``$OUT``, failures
recorded with their tracebacks, and everything saved as one JSON file at the end; and the base
of their CUDA-event clocks."""
from __future__ import annotations

import json
import traceback
from pathlib import Path


class RunLog:
    """``name``.log and ``name``.json under ``out_dir`` (None: terminal only). Subclasses add
    their rows and table; ``extra()`` names what else goes into the JSON."""

    def __init__(self, out_dir: Path | None, name: str):
        self.out_dir, self.name, self.log_file = out_dir, name, None
        if out_dir is not None:
            out_dir.mkdir(parents=True, exist_ok=True)
            self.log_file = open(out_dir / f"{name}.log", "w", buffering=1)
        self.rows: list[dict] = []
        self.data: dict = {"errors": []}

    def log(self, line: str = "") -> None:
        print(line, flush=True)
        if self.log_file is not None:
            self.log_file.write(line + "\n")

    def fail(self, where: str) -> None:
        text = traceback.format_exc()
        self.data["errors"].append({"where": where, "traceback": text})
        self.log(f"!! {where} failed:\n{text}")

    def extra(self) -> dict:
        return {"rows": self.rows}

    def save(self) -> None:
        if self.out_dir is not None:
            (self.out_dir / f"{self.name}.json").write_text(
                json.dumps({**self.data, **self.extra()}, indent=1, default=str))

    def finish(self, status: int = 0) -> int:
        """Save, say where, and give the script's exit status: 1 when ``status`` is or any
        part failed."""
        self.save()
        self.log(f"\nwrote {self.out_dir / (self.name + '.json')} and "
                 f"{self.out_dir / (self.name + '.log')}; {len(self.data['errors'])} errors")
        return 1 if status or self.data["errors"] else 0


class EventClock:
    """CUDA events on the legacy default stream, where torch and fearless both enqueue, and
    ``cycles_per_ms`` for ``torch.cuda._sleep``, which holds the GPU while the host enqueues a
    repetition (so that host launch cost stays out of device times)."""

    def __init__(self, torch):
        self.torch = torch
        s, e = self._event(), self._event()
        s.record()
        torch.cuda._sleep(20_000_000)
        e.record()
        e.synchronize()
        self.cycles_per_ms = 20_000_000 / max(s.elapsed_time(e), 1e-3)

    def _event(self):
        return self.torch.cuda.Event(enable_timing=True)
