"""Launching tile kernels: the CPU tile interpreter, or the cubin through ``cuLaunchKernel``.

A tile kernel runs one tile block per tile of its Out partition: grid = the partition's tile
grid (a 2-d one launched 1-d, in the grouped order of ``backends/tileir/lower.py``), block =
(1, 1, 1) (tileiras picks the threads per block and records them in the cubin's
``.reqntid``, reference/tile-ir.md section 5). Parameters follow the entry ABI of
``backends/tileir/lower.py`` (``abi()``): per tensor a pointer, i32 extents and i32 strides, per
scalar its value. Their byte offsets come from the driver (``cuFuncGetParamInfo``) when it can
tell, else from natural alignment (the C rule the PTX ``.param`` space follows).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fearless.backends.tileir.lower import abi, is_grouped, launch_grid
from fearless.errors import BackendError
from fearless.ir import types as T
from fearless.runtime import dispatch
from fearless.runtime.stream import Stream

@dataclass
class LoadedTile:
    """A loaded tile kernel and the byte layout of its parameters."""

    name: str
    handle: object                 # cuda.core Kernel
    params: dispatch.ParamBuffer   # the entry parameters, packed at their byte offsets
    grouped: bool                  # launched 1-d in grouped tile order (a 2-d Out partition)


def load_tile(name: str, cubin: bytes, types: tuple) -> LoadedTile:
    """Load ``cubin`` on the current device. Raises BackendError."""
    from fearless.runtime.module import load
    loaded = load(name, cubin, "")
    codes = [_code(kind, types[i]) for kind, i in abi(types)]
    params = dispatch.ParamBuffer.of_codes(codes, _driver_offsets(loaded.handle, len(codes)))
    return LoadedTile(name, loaded.handle, params, is_grouped(types))


def _code(kind: str, ty) -> str:
    if kind == "ptr":
        return "Q"
    if kind in ("shape", "stride"):
        return "i"
    return dispatch.scalar_code(ty.dtype)


def _driver_offsets(handle, n: int) -> list | None:
    try:
        from cuda.bindings import driver
        fn = handle.handle
        if isinstance(fn, driver.CUkernel):
            err, fn = driver.cuKernelGetFunction(fn)
            if err != driver.CUresult.CUDA_SUCCESS:
                return None
        out = []
        for i in range(n):
            err, offset, _ = driver.cuFuncGetParamInfo(fn, i)
            if err != driver.CUresult.CUDA_SUCCESS:
                return None
            out.append(int(offset))
        return out
    except Exception:  # an older driver or binding: fall back to natural alignment
        return None


def flat_values(types: tuple, tensors: list, scalars: list) -> list:
    """The entry parameters' values, in ``abi(types)`` order (extents and strides per axis)."""
    out, axis = [], {}
    for kind, i in abi(types):
        t = tensors[i]
        if kind == "ptr":
            out.append(t.data_ptr())
        elif kind in ("shape", "stride"):
            k = axis[(i, kind)] = axis.get((i, kind), -1) + 1
            out.append((t.shape if kind == "shape" else t.strides)[k])
        else:
            v, d = scalars[i], types[i].dtype
            out.append(int(v.view(np.uint16)) if d.bits == 16 and d.is_float else v.item())
    return out


def launch_cuda(loaded: LoadedTile, grid: tuple, types: tuple, tensors: list, scalars: list,
                stream: Stream) -> None:
    """Enqueue one tile-kernel launch on ``stream`` (asynchronous)."""
    from cuda.bindings import driver

    if 0 in grid:
        return
    address = loaded.params.fill(flat_values(types, tensors, scalars))
    (err,) = driver.cuLaunchKernel(loaded.handle.handle, *launch_grid(grid, loaded.grouped),
                                   1, 1, 1, 0, stream.core.handle, address, 0)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise BackendError(f"kernel '{loaded.name}': cuLaunchKernel failed: {err}")


def launch_cpu(fn, grid: tuple, types: tuple, tensors: list, scalars: list) -> None:
    """Interpret the tile kernel now, one tile block after another."""
    from fearless.backends.cpu.tile import run

    args = []
    for ty, t, s in zip(types, tensors, scalars):
        if t is None:
            args.append(s)
            continue
        view = t.host_view()
        if ty.role is T.Role.IN:
            view = view.view()
            view.flags.writeable = False
        args.append(view)
    if 0 not in grid:
        run(fn, grid, args)
