"""Launching tile kernels: the CPU tile interpreter, or the cubin through ``runtime/pack.py``.

A tile kernel runs one tile block per tile of its Out partition: grid = the partition's tile
grid (a 2-d one launched 1-d in grouped order when ``KernelInfo.grouped``, see
``backends/tileir/lower.py``), block = (1, 1, 1) (tileiras picks the threads per block and
records them in the cubin's ``.reqntid``, reference/tile-ir.md section 5). Parameters follow the
kernel's Abi (per tensor a pointer, i32 extents and i32 strides, per scalar its value); their
byte offsets come from the driver (``cuFuncGetParamInfo``) when it can tell, else from natural
alignment (the C rule the PTX ``.param`` space follows).
"""
from __future__ import annotations

from dataclasses import dataclass

from fearless.config import CONFIG
from fearless.errors import ContractError
from fearless.runtime import pack
from fearless.runtime.launch import Limits
from fearless.runtime.args import of_tensor
from fearless.runtime.stream import Stream


@dataclass
class LoadedTile:
    """A loaded tile kernel and the byte layout of its parameters."""

    name: str
    function: int                  # the CUkernel address
    params: pack.ParamBuffer       # the entry parameters, packed at their byte offsets
    grouped: bool                  # launched 1-d in grouped tile order (a 2-d Out partition)
    pdl: bool = False              # launched with programmatic stream serialization
    stream_k: tuple = ()           # (dtype, shape) of a stream-K call's partial sums


OBSERVER = None  # fl.stats while it counts (runtime/stats.py): told of each launch

def load_tile(name: str, cubin: bytes, info) -> LoadedTile:
    """Load ``cubin`` on the current device for the KernelInfo ``info``. Raises BackendError."""
    from fearless.runtime.module import load
    loaded = load(name, cubin, "")
    offsets = _driver_offsets(loaded.handle, len(info.abi.slots))
    return LoadedTile(name, loaded.function, pack.ParamBuffer(info.abi, offsets), info.grouped,
                      info.pdl and CONFIG.pdl, info.stream_k)


def arguments(loaded: LoadedTile, a: list, grid: tuple, stream: Stream) -> list:
    """The launch's per-parameter arguments ``a``, with a stream-K kernel's workspace views
    appended (``runtime/workspace.py``)."""
    if not loaded.stream_k:
        return a
    from fearless.runtime import workspace
    return a + workspace.views(stream, grid[0], *loaded.stream_k)


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


def hardware_grid(grid: tuple, grouped: bool) -> tuple:
    """The hardware grid for a partition grid (x, y, z): grouped order launches 1-d."""
    return (grid[0] * grid[1], 1, grid[2]) if grouped else tuple(grid)


MAX_GRID = Limits().max_grid   # CUDA's grid limits (x, y, z) on sm_80 and later


def fits(hw: tuple) -> bool:
    """Whether the hardware grid ``hw`` is within CUDA's limits (``MAX_GRID``)."""
    return hw[0] <= MAX_GRID[0] and hw[1] <= MAX_GRID[1] and hw[2] <= MAX_GRID[2]


def check_grid(name: str, grid: tuple, grouped: bool) -> None:
    """ContractError naming the kernel when the launch of partition grid ``grid`` (x, y, z)
    needs more tile blocks along a grid axis than CUDA allows (y and z 65535): the driver
    would refuse it only when it runs."""
    hw = hardware_grid(grid, grouped)
    for axis, (g, most) in enumerate(zip(hw, MAX_GRID)):
        if g > most:
            raise ContractError(
                f"its Out partition needs {g} tile blocks along grid {'xyz'[axis]} (partition "
                f"grid {tuple(grid)}), above CUDA's limit {most}", kernel=name,
                help="use larger tiles along that axis, or a persistent schedule "
                     "(ft.persistent())")


def idle_sm_advice(shape: tuple, tile: tuple, tiles: int, sms: int,
                   split: bool = False) -> str | None:
    """Why a launch of an ``ft.mma`` kernel over a 2-d Out of ``shape`` (a GEMM's) in tiles of
    ``tile``, ``tiles`` of them on ``sms`` SMs, wastes the tensor cores, or None. ``split``: a
    stream-K call that cuts every tile's loop into pieces over the SMs (no whole wave; only
    the first two rules apply):

    * a tile axis at least twice the output's extent rounded up to a power of two (at least
      half of every tile past the edge; never advising under 16, the mma's least);
    * under a third of the SMs busy with a tile axis of 128 or more (a smaller tile spreads
      the work), or so few tiles for stream-K to split (each into several pieces, whose f32
      partial sums a fixup launch adds);
    * a tile smaller than 128 x 128 (each capped at the extent's power of two) where tiles of
      that size would still number two thirds of the SMs or more (``nn.linear``'s prefill rule):
      small tiles load more of A and B per output element;
    * a tile larger than that where its tiles leave more than a third of the SMs idle and tiles
      of that size would busy more of them in one wave.

    Other ranks (attention's heads) are not weighed. Measured on the H200 (f16, bk 64,
    benchmarks/RESULTS.md): over 128 x 4096 x 4096, 128 x 128 tiles (32 blocks) ran at 64-67%
    of cuBLAS and 256 x 128 (half past the edge) at 58%, where 64 x 64 (128 blocks) reached
    96-119% and 128 x 64 (64 blocks) 88-108% (sessions 14, 16); at 4096^3, 64 x 64 tiles ran at
    52% of 128 x 128's speed and 128 x 64 at 63%, at 512 x 4096 x 4096 at 57% and 81% (session
    16, one tile per block; persistent, 31-39% of cuBLAS); over 128 x 14336 x 4096, 128 x 256
    tiles (56 blocks) ran at 70% of 128 x 128's speed (112 blocks; session 17); stream-K over
    128 x 4096 x 4096 ran at 63% (128 x 128 tiles) and 49% (128 x 256) of the speed of 64 x 64
    tiles one per block, over 128 x 4096 x 14336 at 77% and 63% (session 19, L2 flushed)."""
    if len(shape) != 2 or tiles == 0:
        return None
    fits = [max(16, 1 << (n - 1).bit_length()) for n in shape]
    for axis, (t, n, fit) in enumerate(zip(tile, shape, fits)):
        if t >= 2 * fit:
            return (f"its tile {tuple(tile)} spans {t} along axis {axis}, where the output "
                    f"has {n}: half or more of every tile's loads and MMAs fall past the "
                    f"edge; use a tile of at most {fit} there")
    if 3 * tiles < sms and max(tile) >= 128:
        if split:
            return (f"stream-K cuts each of the {tiles} tiles into pieces over {sms} SMs, and "
                    f"a fixup launch adds their f32 partial sums (over 128 x 4096 x 4096 on "
                    f"the H200, 128 x 128 tiles so ran at 63% of the speed of 64 x 64 tiles "
                    f"one per block); use smaller tiles, or ft.autotune over "
                    f"ft.configs.gemm()")
        return (f"the launch runs {tiles} tile blocks on {sms} SMs, so most SMs idle (over "
                f"128 x 4096 x 4096 on the H200, 128 x 128 tiles ran at 67% of cuBLAS and "
                f"64 x 64 at 96%); use smaller tiles, or ft.autotune over ft.configs.gemm()")
    if split:
        return None
    big = [min(128, fit) for fit in fits]
    big_tiles = -(-shape[0] // big[0]) * -(-shape[1] // big[1])
    if tile[0] * tile[1] < big[0] * big[1] and 3 * big_tiles >= 2 * sms:
        return (f"its tile {tuple(tile)} is smaller than {big[0]} x {big[1]}, of which the "
                f"output holds {big_tiles}, enough for {sms} SMs; smaller tiles load more of "
                f"the inputs per output element (at 4096^3 on the H200, 64 x 64 tiles ran at "
                f"52% of 128 x 128's speed); use {big[0]} x {big[1]} tiles, or ft.autotune "
                f"over ft.configs.gemm()")
    if tile[0] * tile[1] > big[0] * big[1] and 3 * tiles < 2 * sms and tiles < big_tiles <= sms:
        return (f"the launch runs {tiles} tile blocks on {sms} SMs, over a third idle, where "
                f"{big[0]} x {big[1]} tiles would number {big_tiles} (over 128 x 14336 x 4096 "
                f"on the H200, 128 x 256 tiles ran at 70% of 128 x 128's speed); use "
                f"{big[0]} x {big[1]} tiles, or ft.autotune over ft.configs.gemm()")
    return None


def launch_cuda(loaded: LoadedTile, grid: tuple, tensors: list, scalars: list,
                stream: Stream) -> None:
    """Enqueue one tile-kernel launch on ``stream`` (asynchronous); ``scalars``: per scalar
    parameter its value as its slot takes it (``args.converter``)."""
    if 0 in grid:
        return
    a = [of_tensor(t) if t is not None else s for t, s in zip(tensors, scalars)]
    pack.launch(loaded.function, hardware_grid(grid, loaded.grouped), (1, 1, 1), 0,
                stream.handle, loaded.params.fill(arguments(loaded, a, grid, stream)),
                loaded.name, loaded.pdl)


def launch_cpu(fn, grid: tuple, params, tensors: list, scalars: list,
               racecheck: bool = False, *, interpret, partials: dict | None = None) -> None:
    """Interpret the tile kernel now, one tile block after another; ``params``: the kernel's
    ParamInfo (its In tensors are handed over read-only). With ``racecheck`` (the kernel layer
    passes FEARLESS_RACECHECK's) a scatter that writes one element twice raises RaceError
    when the launch ends. ``interpret``: the cpu backend's tile interpreter, which the kernel
    layer hands over (``backends.cpu.tile.run``: the runtime imports no backend);
    ``partials``: a stream-K call's workspace, shared by its launches."""
    observer, mark = OBSERVER, None
    if observer is not None:
        observer.launch(getattr(fn, "name", "?"))
        mark = observer.start(None)
    args = []
    for p, t, s in zip(params, tensors, scalars):
        if t is None:
            args.append(s)
            continue
        view = t._raw_view()  # this launch holds the tensors' claims (its DeviceOperation's)
        if not p.written:
            view = view.view()
            view.flags.writeable = False
        args.append(view)
    if 0 not in grid:
        interpret(fn, grid, args, racecheck, partials)
    if mark is not None:
        observer.stop(getattr(fn, "name", "?"), None, mark)
