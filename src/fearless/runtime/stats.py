"""The launch paths ``fl.stats`` counts (``fearless/observe.py``): enabling wraps the module
functions every launch goes through, ``pack.launch`` (cuda), ``dispatch.launch_cpu`` and
``tile_launch.launch_cpu`` (the cpu backend), and ``memory.allocate`` (device bytes, freed when
the Buffer is collected); disabling puts the originals back, so a launch with counting off runs
exactly the code it runs without this module."""
from __future__ import annotations

import weakref

from fearless.observe import STATS
from fearless.runtime import device, dispatch, memory, pack, tile_launch

_saved: dict = {}


def install(stats) -> None:
    launch, simt_cpu, tile_cpu, allocate = (pack.launch, dispatch.launch_cpu,
                                            tile_launch.launch_cpu, memory.allocate)
    _saved.update({(pack, "launch"): launch, (dispatch, "launch_cpu"): simt_cpu,
                   (tile_launch, "launch_cpu"): tile_cpu, (memory, "allocate"): allocate})

    def on_cuda(function, grid, block, shared, stream, params, kernel, pdl=False):
        stats.launch(kernel)
        return launch(function, grid, block, shared, stream, params, kernel, pdl)

    def on_simt_cpu(kernel, *args, **kwargs):
        stats.launch(kernel)
        return simt_cpu(kernel, *args, **kwargs)

    def on_tile_cpu(fn, *args, **kwargs):
        stats.launch(getattr(fn, "name", "?"))
        return tile_cpu(fn, *args, **kwargs)

    def on_allocate(nbytes, stream=None):
        buffer = allocate(nbytes, stream)
        size = max(nbytes, 1)   # allocate() takes one byte for an empty tensor
        stats.allocated(size)
        weakref.finalize(buffer, stats.freed, size)
        return buffer

    pack.launch, dispatch.launch_cpu, tile_launch.launch_cpu, memory.allocate = \
        on_cuda, on_simt_cpu, on_tile_cpu, on_allocate


def uninstall() -> None:
    for (module, name), fn in _saved.items():
        setattr(module, name, fn)
    _saved.clear()


STATS.hook(install, uninstall, memory=lambda: device.current_backend() == "cuda")
