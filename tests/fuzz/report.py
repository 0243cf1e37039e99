"""The fuzzer's log files and its summary table.

``Report`` collects one ``harness.Outcome`` per seed: ``log.txt`` gets a line each, every
failure gets ``failures/seed_N.py`` (the kernel) and ``failures/seed_N.txt`` (what went wrong
and how to reproduce it), and ``summary()`` is the table printed last on stdout.
"""
from __future__ import annotations

import shutil
from collections import Counter, defaultdict
from pathlib import Path

from tests.fuzz.harness import Outcome, describe

STATUSES = ("pass", "mismatch", "crash", "rejected", "error", "hang", "not run")


class Report:
    def __init__(self, out: Path | None):
        self.out = out
        self.outcomes: list[Outcome] = []
        self.log = None
        if out is not None:
            (out / "failures").mkdir(parents=True, exist_ok=True)
            self.log = open(out / "log.txt", "w")

    def add(self, o: Outcome) -> None:
        self.outcomes.append(o)
        if self.log is not None:
            times = " ".join(f"{k}={v:.2f}s" for k, v in o.times.items())
            self.log.write(f"seed {o.seed} {o.kind} {o.status} {o.cls} checked={o.checked} "
                           f"{times}\n")
            self.log.flush()
            if o.status != "pass":
                self.keep(o)

    def keep(self, o: Outcome) -> None:
        base = self.out / "failures" / f"seed_{o.seed}"
        if o.source and Path(o.source).exists():
            shutil.copyfile(o.source, base.with_suffix(".py"))
        base.with_suffix(".txt").write_text(describe(o) + "\n")

    def summary(self, elapsed: float, mode: str) -> str:
        by_status = Counter(o.status for o in self.outcomes)
        classes: dict = defaultdict(list)
        for o in self.outcomes:
            if o.status != "pass":
                classes[(o.status, o.cls)].append(o.seed)
        kinds = Counter(o.kind for o in self.outcomes)
        stats = Counter()
        times = Counter()
        for o in self.outcomes:
            stats.update(o.stats)
            times.update(o.times)
        n = len(self.outcomes) or 1
        seeds = sorted(o.seed for o in self.outcomes)
        span = f"{seeds[0]}..{seeds[-1]}" if seeds else "-"
        lines = [f"fuzz summary ({mode}): {len(self.outcomes)} kernels "
                 f"({', '.join(f'{v} {k}' for k, v in sorted(kinds.items()))}), seeds {span}, "
                 f"{elapsed:.0f} s",
                 "  " + "  ".join(f"{s}: {by_status.get(s, 0)}" for s in STATUSES
                                  if s == "pass" or by_status.get(s))]
        checked = sum(o.checked for o in self.outcomes)
        unchecked = ", ".join(f"{k} {v}" for k, v in sorted(stats.items())
                              if k not in ("threads", "blocks"))
        lines.append(f"  elements checked: {checked}; threads {stats['threads']}, tile blocks "
                     f"{stats['blocks']}; not checked: {unchecked or 'none'}")
        lines.append("  mean seconds per kernel: " + ", ".join(
            f"{k} {v / n:.3f}" for k, v in sorted(times.items())))
        if classes:
            lines.append(f"  {'status':<9} {'count':>5}  class: seeds")
            for (status, cls), ss in sorted(classes.items(), key=lambda kv: -len(kv[1])):
                shown = " ".join(map(str, ss[:12])) + (" ..." if len(ss) > 12 else "")
                lines.append(f"  {status:<9} {len(ss):>5}  {cls}: {shown}")
        if self.out is not None:
            lines.append(f"  logs: {self.out / 'log.txt'}; failing kernels: "
                         f"{self.out / 'failures'}")
        return "\n".join(lines)

    def close(self):
        if self.log is not None:
            self.log.close()
