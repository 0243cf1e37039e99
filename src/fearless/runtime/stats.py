"""The runtime side of ``fl.stats`` (``fearless/observe.py``): while it counts, the launch paths
(``pack.launch`` on cuda, ``dispatch.launch_cpu`` and ``tile_launch.launch_cpu`` on the cpu
backend) and ``memory.allocate`` tell an observer of each launch and allocation through their
``OBSERVER`` variable, which is None otherwise: one test per launch when off. Launches recorded
into a graph (``fl.capture()`` on cuda) and a cpu graph's replayed launches are not counted as
launches (``graphs.replays`` counts replays), nor is work ``Stats.quiet()`` wraps."""
from __future__ import annotations

import weakref

from fearless.observe import STATS
from fearless.runtime import dispatch, memory, pack, tile_launch
from fearless.runtime.stream import current_stream

_MODULES = (pack, dispatch, tile_launch, memory)


class _Observer:
    def __init__(self, stats):
        self.stats = stats

    def launch(self, kernel: str) -> None:
        if current_stream().capture is None:
            self.stats.launch(kernel)

    def allocation(self, buffer, nbytes: int) -> None:
        self.stats.allocated(nbytes)
        weakref.finalize(buffer, self.stats.freed, nbytes)


def install(stats) -> None:
    observer = _Observer(stats)
    for module in _MODULES:
        module.OBSERVER = observer


def uninstall() -> None:
    for module in _MODULES:
        module.OBSERVER = None


STATS.hook(install, uninstall)
