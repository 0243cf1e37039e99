"""Launch contracts and everything checked on the host before a kernel runs.

``plan()`` validates a launch configuration against the kernel's index space and the device's limits
and returns a ``PreparedLaunch``, the only ticket to a safe launch. Before each launch,
``check_arguments()`` refuses moved tensors (``MovedError``), writable arguments that overlap
another argument or themselves or memory a pending operation holds (``AliasError``) and outputs the
launch does not cover (``ContractError``); ``check_compiled()`` compares the block with what the
compiled kernel's registers allow. All of it runs before the GPU is touched.

Limits (CUDA C Programming Guide, "Compute Capabilities", identical for compute capability 8.0
and newer): at most 1024 threads per block, block x/y <= 1024, block z <= 64, grid x <= 2^31 - 1,
grid y/z <= 65535. Only ``index_3d()`` reads the z coordinates, so a launch with more than one
thread or block along z is refused for a kernel that does not use it: its threads along z would
repeat each other's work (and writes).
"""
from __future__ import annotations

import functools
import math
import operator
from dataclasses import dataclass, field

from fearless.errors import AliasError, ArgumentTypeError, ContractError
from fearless.runtime.ownership import READ, WRITE
from fearless.runtime.partition import Partition

# 256 threads whatever the rank, one warp along x: 2-d 32 columns by 8 rows, 3-d 32 x 4 x 2
DEFAULT_BLOCK = {1: (256,), 2: (32, 8), 3: (32, 4, 2)}
_EXAMPLE = {1: "kernel.prepare(n)", 2: "kernel.prepare((rows, cols))",
            3: "kernel.prepare((n0, n1, n2))"}


@dataclass(frozen=True)
class Limits:
    """A device's launch limits. The cpu backend follows the rules every sm_80+ GPU keeps: its
    opt-in shared memory is sm_86's 99 KB (the smallest), and it has no compute capability."""

    max_threads_per_block: int = 1024
    max_block: tuple = (1024, 1024, 64)
    max_grid: tuple = (2**31 - 1, 65535, 65535)
    max_shared_optin: int = 99 * 1024    # bytes per block for a kernel that opts in
    compute_capability: tuple | None = None


@functools.lru_cache(maxsize=None)
def device_limits(backend: str) -> Limits:
    """The launch limits of the current GPU (cuda) or of CUDA's sm_80+ rules (cpu)."""
    if backend != "cuda":
        return Limits()
    from fearless.runtime.device import cuda_device
    dev = cuda_device()
    p = dev.properties
    return Limits(p.max_threads_per_block,
                  (p.max_block_dim_x, p.max_block_dim_y, p.max_block_dim_z),
                  (p.max_grid_dim_x, p.max_grid_dim_y, p.max_grid_dim_z),
                  p.max_shared_memory_per_block_optin, tuple(dev.compute_capability))


@dataclass(frozen=True)
class PreparedLaunch:
    """A checked launch configuration for one kernel on one backend.

    ``size``: the problem size, ``(n,)``, ``(rows, cols)`` or ``(n0, n1, n2)``; ``grid``/``block``:
    in blocks and threads, x first (``block=(32, 8)`` is 32 columns by 8 rows; ``(32, 4, 2)`` is
    32 along n2, 4 along n1, 2 along n0). Only ``Kernel.prepare`` makes
    them; using one with another kernel is a ContractError.
    """

    kernel: object
    backend: str
    size: tuple
    grid: tuple
    block: tuple
    shared: int = 0  # bytes of dynamic shared memory per block
    # runtime/plan.py: the LaunchPlan of each argument signature launched with this ticket
    _plans: dict = field(default_factory=dict, compare=False, repr=False, hash=False)
    # runtime/fastcall.py: [the fast function of the plan launched last, or None]
    _last: list = field(default_factory=lambda: [None], compare=False, repr=False, hash=False)

    @property
    def dims(self) -> int:
        return len(self.size)

    @property
    def threads_per_block(self) -> int:
        return math.prod(self.block)

    def __repr__(self) -> str:
        extra = f", shared={self.shared}" if self.shared else ""
        return (f"PreparedLaunch(kernel={self.kernel.name!r}, size={self.size}, grid={self.grid}, "
                f"block={self.block}{extra}, backend={self.backend!r})")


def _as_dims(kernel: str, what: str, value, dims: int | None = None) -> tuple:
    items = value if isinstance(value, tuple) else (value,)
    if not items or len(items) > 3 or (dims is not None and len(items) != dims):
        want = f"{dims} numbers" if dims else "an int, a (rows, cols) pair or 3 ints"
        raise ContractError(f"{what} must be {want}, got {value!r}", kernel=kernel)
    out = []
    for v in items:
        if isinstance(v, bool) or not isinstance(v, int) and not hasattr(v, "__index__"):
            raise ContractError(f"{what} must hold integers, got {value!r}", kernel=kernel)
        v = int(v.__index__())
        if v < 0:
            raise ContractError(f"{what} must not be negative, got {value!r}", kernel=kernel)
        out.append(v)
    return tuple(out)


def plan(kernel, index_space: int, size, block, backend: str, shared: int | None = 0,
         contract=None, on_device: bool = True) -> PreparedLaunch:
    """Check a launch of ``kernel`` over ``size`` and return its PreparedLaunch.
    ``on_device=False`` checks against the rules every sm_80+ GPU keeps instead of the current
    device's limits, shared memory and compute capability, touching no GPU (``fl.autotune``
    checks each config's block so when it is decorated).

    Raises ContractError when the launch breaks the kernel's contract, the kernel's index space
    differs from the launch's dimensions, a block is empty or too large, the grid exceeds the
    device's limits, or the device lacks the shared memory or compute capability asked for.
    """
    name = kernel.name
    size = _as_dims(name, "the problem size", size)
    dims = len(size)
    if contract is not None:
        block, shared = _apply_contract(name, contract, dims, index_space, block, shared)
    shared = 0 if shared is None else shared
    if index_space and index_space != dims:
        raise ContractError(f"the kernel uses fl.thread.index_{index_space}d(), but the launch is "
                            f"{dims}-d (size {size})", kernel=name,
                            help=f"prepare it with a {index_space}-d size, for example "
                                 + _EXAMPLE[index_space])
    if dims == 3 and index_space != 3:
        raise ContractError(f"a 3-d launch (size {size}) needs a kernel that uses "
                            f"fl.thread.index_3d(): nothing else tells its threads apart along z",
                            kernel=name, help="prepare it with a 1-d or 2-d size")
    block = DEFAULT_BLOCK[dims] if block is None else _as_dims(name, "the block", block, dims)
    limits = device_limits(backend) if on_device else Limits()
    if any(b == 0 for b in block):
        raise ContractError(f"block {block} has no threads", kernel=name)
    _check_block(name, block, limits)
    # x runs along the last (fastest) axis of the problem
    grid = tuple(-(-extent // b) for extent, b in zip(reversed(size), block))
    for axis, (g, most) in enumerate(zip(grid, limits.max_grid)):
        if g > most:
            raise ContractError(f"the launch needs {g} blocks along grid {'xyz'[axis]}, above the "
                                f"device limit {most}", kernel=name,
                                help="use a larger block, or split the problem")
    if isinstance(shared, bool) or not isinstance(shared, int) or shared < 0:
        raise ContractError(f"shared= must be a number of bytes, got {shared!r}", kernel=name)
    if contract is not None and on_device:
        _device_contract(name, contract, limits)
    return PreparedLaunch(kernel, backend, size, grid, block, shared)


def plan_raw(kernel, grid, block, backend: str, shared: int = 0,
             index_space: int = 0) -> PreparedLaunch:
    """The PreparedLaunch of ``kernel.launch_raw(grid, block, ...)``: a raw launch skips the
    kernel's contract and index space, not the types or the device's limits.

    ``grid`` and ``block``: an int or a tuple of 1 to 3 ints >= 1, x first (a shorter one is
    padded with 1s, as CUDA does), more than 1 along z only when ``index_space`` (the kernel's)
    is 3; the block within the device's threads per block and per-axis limits, the grid within
    its per-axis limits; ``shared``: bytes of dynamic shared
    memory, an int from 0 to the device's opt-in limit. The cpu backend holds launches to the
    limits of the sm_80+ GPUs it stands in for (``device_limits``). Raises ContractError.
    """
    name = kernel.name
    grid, block = _raw_dims(name, "grid", grid), _raw_dims(name, "block", block)
    rank = max(len(grid), len(block), index_space)  # the kernel's axes exist, 1 or more
    grid, block = grid + (1,) * (rank - len(grid)), block + (1,) * (rank - len(block))
    if rank == 3 and index_space != 3 and (grid[2] > 1 or block[2] > 1):
        raise ContractError(f"launch_raw: grid {grid} and block {block} have more than one "
                            f"thread along z, but the kernel does not use fl.thread.index_3d(), "
                            f"the only reader of z: threads along z would repeat the work of the "
                            f"others", kernel=name, help="give z the extent 1")
    limits = device_limits(backend)
    _check_block(name, block, limits, "launch_raw: ")
    _check_axes(name, "launch_raw: grid", grid, limits.max_grid)
    if isinstance(shared, bool) or not isinstance(shared, int) or \
            not 0 <= shared <= limits.max_shared_optin:
        raise ContractError(f"launch_raw: shared= must be bytes of dynamic shared memory from 0 "
                            f"to the device's {limits.max_shared_optin}, got {shared!r}",
                            kernel=name)
    size = tuple(g * b for g, b in zip(reversed(grid), reversed(block)))
    return PreparedLaunch(kernel, backend, size, grid, block, shared)


def _check_block(name: str, block: tuple, limits: Limits, prefix: str = "") -> None:
    """ContractError unless ``block`` is within the device's threads per block and per-axis
    limits; ``prefix`` starts each message."""
    threads = math.prod(block)
    if threads > limits.max_threads_per_block:
        raise ContractError(f"{prefix}block {block} has {threads} threads; the device allows at "
                            f"most {limits.max_threads_per_block} threads per block", kernel=name)
    _check_axes(name, f"{prefix}block", block, limits.max_block)


def _check_axes(name: str, what: str, dims: tuple, most: tuple) -> None:
    for axis, (n, m) in enumerate(zip(dims, most)):
        if n > m:
            raise ContractError(f"{what} {'xyz'[axis]} = {n} exceeds the device limit {m}",
                                kernel=name)


def _raw_dims(name: str, what: str, value) -> tuple:
    """``value`` (an int or a tuple/list of ints, x first) as a tuple of 1 to 3 ints >= 1."""
    items = tuple(value) if isinstance(value, (tuple, list)) else (value,)
    try:
        if any(isinstance(v, bool) for v in items):
            raise TypeError("a bool is not an extent")
        items = tuple(operator.index(v) for v in items)  # NumPy integers too; floats refused
    except TypeError:
        raise ContractError(f"launch_raw: {what} must be an int or a tuple of ints, got "
                            f"{value!r}", kernel=name) from None
    if not 1 <= len(items) <= 3:
        raise ContractError(f"launch_raw: {what} {value!r} must have 1 to 3 axes (x, y, z)",
                            kernel=name)
    if min(items) < 1:
        raise ContractError(f"launch_raw: every {what} extent must be at least 1, got {value!r}",
                            kernel=name)
    return items


def _apply_contract(name: str, contract, dims: int, index_space: int, block, shared):
    """The launch's block and dynamic shared bytes under ``contract`` (defaults filled in)."""
    if dims != contract.dims:
        raise ContractError(f"the contract declares a {contract.dims}-d launch, but the size "
                            f"is {dims}-d", kernel=name,
                            help=_EXAMPLE[contract.dims])
    if index_space and index_space != contract.dims:
        raise ContractError(f"the contract declares dims={contract.dims}, but the kernel uses "
                            f"fl.thread.index_{index_space}d()", kernel=name)
    if block is None:
        block = contract.block
    elif contract.block is not None:
        given = _as_dims(name, "the block", block, dims)
        if given != contract.block:
            raise ContractError(f"block {given} differs from the contract's exact block "
                                f"{contract.block}", kernel=name,
                                help="leave block= out to use the contract's")
    if block is not None and contract.max_threads is not None:
        given = _as_dims(name, "the block", block, dims)
        if math.prod(given) > contract.max_threads:
            raise ContractError(f"block {given} has {math.prod(given)} threads, above the "
                                f"contract's max_threads={contract.max_threads}", kernel=name)
    lo, hi = contract.shared_range
    if shared is None:
        shared = lo
    if not isinstance(shared, bool) and isinstance(shared, int) and not lo <= shared <= hi:
        want = f"exactly {lo}" if lo == hi else f"between {lo} and {hi}"
        raise ContractError(f"the launch asks for {shared} bytes of dynamic shared memory; "
                            f"the contract allows {want}", kernel=name)
    return block, shared


def _device_contract(name: str, contract, limits: Limits) -> None:
    """The device can give the contract's shared memory and has its compute capability."""
    hi = contract.shared_range[1]
    if hi > limits.max_shared_optin:
        raise ContractError(f"the contract allows {hi} bytes of dynamic shared memory per "
                            f"block; the device gives at most {limits.max_shared_optin}",
                            kernel=name, help="lower the contract's dynamic_shared maximum")
    need, have = tuple(contract.min_compute_capability), limits.compute_capability
    if have is not None and have < need:
        raise ContractError(f"the contract needs compute capability {need[0]}.{need[1]}; this "
                            f"GPU has {have[0]}.{have[1]}", kernel=name)


def check_requires(kernel: str, requirements, names: list[str], args,
                   what: str = "the contract's requirement",
                   fix: str = "change the kernel's contract") -> None:
    """Every relation of ``requirements`` (a contract's or a tile kernel's ``requires``) holds
    for this launch's arguments, ``names[i]`` the parameter of ``args[i]``; else ContractError
    (``Requirement.check``: ``what`` names the relation, ``fix`` ends the help line)."""
    env = dict(zip(names, args))  # arrays have a shape; len() reads its first extent
    for requirement in requirements:
        requirement.check(kernel, env, what, fix)


SHARED_LIMIT = 48 * 1024  # bytes per block without the opt-in attribute (sm_80+)


def check_shared(kernel: str, launch: PreparedLaunch, shared: tuple, contract=None) -> None:
    """Dynamic shared memory must be asked for exactly when the kernel uses it; static and
    dynamic shared memory together must fit the device: the 48 KB every sm_80+ device gives
    without opting in, or the device's opt-in limit when the contract allows more than that or
    the static arrays alone take more (they then move to dynamic shared memory)."""
    from fearless.dtypes import from_name
    dynamic = [d for _, shape, d in shared if shape is None]
    if dynamic and launch.shared == 0:
        raise ContractError("the kernel uses fl.shared.dynamic(), but the launch gives it no "
                            "dynamic shared memory", kernel=kernel,
                            help=f"prepare it with shared=<bytes per block>, for example "
                                 f"shared={launch.threads_per_block} * itemsize")
    static = sum(math.prod(shape) * from_name(d).itemsize for _, shape, d in shared
                 if shape is not None)
    limit = SHARED_LIMIT
    if (contract is not None and contract.shared_range[1] > SHARED_LIMIT) or \
            static > SHARED_LIMIT:  # over 48 KB, the static arrays opt in (llvm/shared_pool.py)
        limit = device_limits(launch.backend).max_shared_optin
    if static + launch.shared > limit:
        raise ContractError(f"the kernel uses {static} bytes of static and {launch.shared} of "
                            f"dynamic shared memory per block, above {limit}",
                            kernel=kernel, help="use smaller tiles, or a contract whose "
                                                "dynamic_shared maximum opts in to more")


def check_warps(kernel: str, launch: PreparedLaunch, warp_full: bool) -> None:
    """A kernel with full-mask warp ops needs whole warps: a block of a multiple of 32 threads
    (a shorter last warp would wait for lanes that do not exist)."""
    if warp_full and launch.threads_per_block % 32:
        raise ContractError(f"the kernel uses warp operations over all 32 lanes, but block "
                            f"{launch.block} has {launch.threads_per_block} threads, not a "
                            f"multiple of 32", kernel=kernel,
                            help="prepare it with a block of a multiple of 32 threads")


def check_compiled(kernel: str, launch: PreparedLaunch, registers: int,
                   max_threads: int) -> None:
    """Refuse a block larger than the compiled kernel can run (registers, shared memory)."""
    if launch.threads_per_block > max_threads:
        raise ContractError(f"the compiled kernel uses {registers} registers per thread, so a "
                            f"block holds at most {max_threads} threads; the launch asks for "
                            f"{launch.threads_per_block}", kernel=kernel,
                            help=f"prepare it with a smaller block, e.g. block={max_threads}")


def check_arguments(kernel: str, names: list[str], written: list[bool], tensors: list) -> None:
    """Alias and ownership checks over the array arguments (``tensors[i]`` None for scalars;
    ``written[i]``: the parameter is written, a SIMT array with a writable access or a tile
    kernel's Out partition).

    Besides the overlap rules above: a partitioned (moved) tensor is a MovedError; memory that a
    pending operation writes, or reads when this launch writes it, is an AliasError.
    """
    arrays = [(n, t, w) for n, t, w in zip(names, tensors, written) if t is not None]
    for name, tensor, writes in arrays:
        tensor._check_use(WRITE if writes else READ,
                          "write it" if writes else "read it", kernel=kernel, param=name)
        if writes and tensor.readonly:
            raise ArgumentTypeError(f"'{name}' is written, but its memory is read-only",
                                    kernel=kernel, param=name,
                                    help="pass a writable array (NumPy: a copy, or "
                                         "flags.writeable = True)")
        if writes and tensor.size > 1 and tensor.has_internal_overlap():
            raise AliasError(f"'{name}' is written, but several of its elements share memory "
                             f"(strides {tensor.strides})", kernel=kernel, param=name,
                             help="pass a tensor without broadcast or overlapping strides")
    for i, (name, tensor, writes) in enumerate(arrays):
        if not writes or tensor.size == 0:
            continue
        lo, hi = tensor.byte_extent()
        for j, (other, ot, _) in enumerate(arrays):
            if i == j or ot.size == 0:
                continue
            olo, ohi = ot.byte_extent()
            if lo < ohi and olo < hi:
                raise AliasError(f"'{name}' is written and overlaps the memory of '{other}'",
                                 kernel=kernel, param=name,
                                 help="a written argument must not share memory with any other "
                                      "argument; pass a separate output tensor")


def check_coverage(kernel: str, launch: PreparedLaunch, params, tensors, owned: dict) -> None:
    """Every element of a written array must belong to some thread of the launch. ``owned``:
    per array written at computed indices, its coverage (``analysis/owners.py``: per axis,
    ``(grid axis, elements per block)`` or ``(None, extent)``), or None when not known."""
    for p, tensor in zip(params, tensors):
        name = p.name
        if tensor is None or not p.disjoint:
            continue
        if name in owned:
            cover = owned[name]
            if cover is None or all(e <= (launch.grid[g] * n if g is not None else n)
                                    for e, (g, n) in zip(tensor.shape, cover)):
                continue
            reach = _extents(launch.grid[g] * n if g is not None else n for g, n in cover)
            raise ContractError(f"the launch writes {reach} elements of '{name}' but it has "
                                f"shape {tensor.shape}; elements outside would never be "
                                f"written", kernel=kernel, param=name,
                                help="prepare more blocks: each block writes "
                                     f"{_extents(n for _, n in cover)} elements")
        if tensor.ndim == launch.dims and all(e <= s for e, s in zip(tensor.shape, launch.size)):
            continue
        raise ContractError(f"the launch covers {launch.size} but '{name}' has shape "
                            f"{tensor.shape}; elements outside the launch would never be written",
                            kernel=kernel, param=name,
                            help=f"prepare the launch with the output's shape, "
                                 f"kernel.prepare({tensor.shape if tensor.ndim > 1 else len(tensor)})")


def _extents(counts) -> str:
    """Elements per axis for a message: a stride loop's axis (``math.inf``) reads "all"."""
    return str(tuple("all" if n == math.inf else n for n in counts)).replace("'", "")


def operation_roles(kernel: str, params, args, tensors) -> tuple[list, list, list]:
    """``(reads, writes, partitions)`` of a lazy launch, for its DeviceOperation to hold.

    ``args`` are the caller's arguments (Partitions included), ``tensors`` the Tensors launched
    (a Partition's own tensor in its place, None for scalars). A Partition must be passed for a
    written parameter: ArgumentTypeError otherwise.
    """
    reads, writes, partitions = [], [], []
    for p, arg, tensor in zip(params, args, tensors):
        name = p.name
        written = tensor is not None and p.disjoint
        if isinstance(arg, Partition):
            if not written:
                raise ArgumentTypeError("a Partition is an exclusive output, but this parameter "
                                        "is only read", kernel=kernel, param=name,
                                        help="pass the tensor itself for a read-only parameter")
            partitions.append(arg)
        elif tensor is not None:
            (writes if written else reads).append(tensor)
    return reads, writes, partitions
