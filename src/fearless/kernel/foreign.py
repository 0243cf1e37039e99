"""Foreign kernels: CUDA C++, PTX or a cubin launched through fearless's checked launch system.

    saxpy = fl.foreign.cuda(r'''
        extern "C" __global__ void saxpy(float a, const float* x, long long x_len,
                                         float* out, long long out_len) {
            long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
            if (i < out_len) out[i] = a * x[i];
        }''', "saxpy",
        params={"a": fl.f32, "x": fl.Slice[fl.f32], "out": fl.DisjointSlice[fl.f32]},
        contract=fl.Contract(dims=1, max_threads=1024, requires="len(x) == len(out)"))
    launch = saxpy.prepare(len(out))
    with fl.unsafe():
        saxpy[launch](2.0, x, out)

``fl.foreign.cuda(source, name, params=..., contract=None, arch=None, options=())``,
``fl.foreign.ptx(text, name, params=..., contract=None)`` and
``fl.foreign.cubin(data or path, name, params=..., contract=None)`` make a ``ForeignKernel``: a
SIMT ``Kernel`` whose parameters come from ``params`` (name -> the usual SIMT annotation, with
a concrete dtype, ``kernel/params.py``'s ``declare``) instead of a Python signature, and whose
code is the one given. Everything else is the SIMT kernel's: ``prepare`` (the contract, block
and grid limits), ``kernel[launch](...)``, ``.op``, ``launch_raw``, the launch plans, and every
host check before a launch (argument count, dtype and rank, array on the backend, aliasing of
a written array, ownership and stream order, ``requires``, coverage of each ``DisjointSlice``
by the launch's size, shared memory, the registers of the loaded code).

**ABI.** The entry takes the parameters exactly as fearless's own SIMT entries take them
(``compiler/abi.py``'s ``simt_abi`` for contiguous arrays, no bounds checks, no coarsening),
in the declared order, and nothing else::

    fl.f32 a                       ->  float a                      (by value; see C_TYPES)
    fl.Slice[fl.f32] x             ->  const float* x, long long x_len
    fl.DisjointSlice[fl.f32] out   ->  float* out, long long out_len
    fl.Array[fl.f32, 2] m          ->  const float* m, long long m_n0, long long m_n1

Arrays are C-contiguous (a strided view is refused; pass a copy) and their extents are
elements, as ``long long``. ``kernel.c_signature`` prints the prototype to write. Declare the
CUDA function ``extern "C"`` so that its PTX name is the one given. The grid is
``prepare(size)``'s: x runs along the last axis of the size, ``ceil(n / block)`` blocks; the
kernel must skip threads past the end itself. A 3-d launch needs ``contract=fl.Contract(dims=3,
...)`` (fearless cannot see which thread indices the code reads).

**Checked at load.** The PTX's ``.entry`` is read (``runtime/entry_params.py``) when the kernel
is made: a parameter count, size or kind (an integer or pointer against a float) that differs
from the declared slots is a CompileError naming the kernel and the parameter. A cubin's
layout is read from the driver (``cuKernelGetParamInfo``) when it is loaded on the GPU: on a
machine without one that check is deferred (``entry_checked`` is False until then). On the GPU
every foreign kernel's loaded layout is compared again, and its offsets are the ones packed.

**Compiling.** ``fl.foreign.cuda`` compiles with NVRTC (``runtime/nvrtc.py``) eagerly, when the
kernel is made, for ``arch``: by default the GPU's, or sm_80 when there is no GPU (PTX for
compute_80 runs on every GPU fearless supports: the PTX is assembled for the device at load).
It is compiled again in each process (no disk cache). PTX is assembled for the device with
nvJitLink at the first launch on the GPU.

**Safety.** The body cannot be checked, so every launch (``kernel[launch](...)``, ``.op``,
``launch_raw``) needs ``with fl.unsafe():``; without it the launch is a SafetyError. The cpu
backend cannot interpret foreign code: there the host checks run, then the launch is a
LaunchError.
"""
from __future__ import annotations

import inspect
import os
import re
import threading

from fearless.compiler import Compiled
from fearless.compiler.abi import EXTENT, PTR, simt_abi
from fearless.compiler.info import KernelInfo, ParamInfo
from fearless.errors import ArgumentTypeError, CompileError, ContractError, FearlessError, \
    LaunchError, SafetyError
from fearless.ir import types as T
from fearless.kernel import params as P
from fearless.kernel.simt import Kernel, _Entry
from fearless.runtime import ahead, device, launch as contracts, nvrtc, pack
from fearless.runtime.contract import Contract
from fearless.runtime.entry_params import BITS, FLOAT, INT, EntryParam, Expected, compare, \
    ptx_entry
from fearless.runtime.module import allow_dynamic_shared, load, param_layout, ptx_to_cubin
from fearless.simt.safety import in_unsafe
from fearless.tracebacks import hide_internal_frames, user_facing

__all__ = ["ForeignKernel", "cuda", "ptx", "cubin", "C_TYPES"]

# the C type of each scalar dtype, as the entry takes it by value (16-bit floats: their bits
# also fit an unsigned short)
C_TYPES = {"bool": "bool", "i8": "signed char", "u8": "unsigned char", "i16": "short",
           "u16": "unsigned short", "i32": "int", "u32": "unsigned int", "i64": "long long",
           "u64": "unsigned long long", "f16": "__half", "bf16": "__nv_bfloat16",
           "f32": "float", "f64": "double"}
NO_GPU_ARCH = "sm_80"  # fl.foreign.cuda's target without a GPU or arch=: the oldest supported


class ForeignKernel(Kernel):
    """A SIMT kernel whose code fearless did not compile; see the module docstring.

    ``ptx`` / ``cubin``: the code (one of them may be None); ``origin``: where it came from
    ("CUDA C++ for sm_90", "PTX", "a cubin"); ``entry_checked``: whether the entry's parameters
    were compared with the declaration yet (a cubin's only once loaded on a GPU)."""

    def __init__(self, name: str, params, contract: Contract | None, *, ptx: str | None = None,
                 cubin: bytes | None = None, origin: str):
        # Kernel.__init__ reads a Python function; a foreign kernel has its declaration instead
        _check_name(name)
        self.fn = None
        self.name = self.__name__ = self.__qualname__ = name
        self._cap = None
        self._params = self._runtime_params = P.declare(name, params)
        self._compiled, self._entries = {}, {}
        self._lock = threading.Lock()
        self._key_locks: dict = {}   # BaseKernel.compiled's, one per specialisation key
        self.bounds_checks = False
        if contract is not None and not isinstance(contract, Contract):
            raise ContractError(f"contract= takes a fl.Contract, got {contract!r}", kernel=name)
        if contract is not None:
            contract.bind(name, [p.name for p in self._params])
        self.contract = contract
        self.ptx, self.cubin, self.origin = ptx, cubin, origin
        self.abi = simt_abi([(p.dtype, p.ndim if p.kind is P.ARRAY else None, True)
                             for p in self._params])
        info = KernelInfo(tuple(ParamInfo(p.name, p.dtype, p.ndim if p.kind is P.ARRAY else -1,
                                          True, p.written, p.access is T.Access.DISJOINT)
                                for p in self._params), self.abi, self.index_space)
        self._code = Compiled(name, (), ptx=ptx, cubin=cubin, info=info,
                              label=f"(foreign, {origin})")
        self._loaded = None
        declared = dict(params)  # the annotations as given, for help() and inspect.signature()
        self.__signature__ = inspect.Signature(
            [inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                               annotation=declared[p.name]) for p in self._params])
        self.__doc__ = f"Foreign kernel '{name}' ({origin}): {self.c_signature}"
        self.entry_checked = False
        if ptx is not None:
            compare(name, ptx_entry(name, ptx, name), self._expected(), "the PTX entry",
                    self.c_signature)
            self.entry_checked = True

    def __repr__(self) -> str:
        return f"<fearless foreign kernel {self.name} ({self.origin})>"

    # what a Python kernel reads from its source, here from the declaration ------------------

    @property
    def captured(self):
        raise CompileError("a foreign kernel has no Python source", kernel=self.name)

    @property
    def params(self) -> list:
        return self._params

    @property
    def index_space(self) -> int:  # the contract's dims: fearless cannot read the code's
        return self.contract.dims if self.contract is not None else 0

    @property
    def _launch_space(self) -> int:
        return self.index_space

    @property
    def c_signature(self) -> str:
        """The C prototype the entry must have (see the module docstring's ABI)."""
        parts = []
        for p in self._params:
            c_type = C_TYPES[p.dtype.name]
            if p.kind is not P.ARRAY:
                parts.append(f"{c_type} {p.name}")
                continue
            const = "const " if p.access is T.Access.READ else ""
            parts.append(f"{const}{c_type}* {p.name}")
            parts += [f"long long {p.name}_len"] if p.ndim == 1 else \
                [f"long long {p.name}_n{k}" for k in range(p.ndim)]
        return f'extern "C" __global__ void {self.name}({", ".join(parts)})'

    def _expected(self) -> list[Expected]:
        """The slots fearless packs, described for ``entry_params.compare``."""
        out = []
        for slot in self.abi.slots:
            p = self._params[slot.param]
            if slot.kind == PTR:
                out.append(Expected(p.name, f"{p.name}'s pointer", 8, INT))
            elif slot.kind == EXTENT:
                what = f"len({p.name})" if p.ndim == 1 else f"{p.name}'s extent {slot.axis}"
                out.append(Expected(p.name, what, 8, INT))
            else:
                dt = p.dtype
                kind = (BITS if dt.bits == 16 else FLOAT) if dt.is_float else INT
                out.append(Expected(p.name, f"'{p.name}' ({dt})", dt.itemsize, kind))
        return out

    # compiling and launching: the SIMT kernel's, with the declared code ---------------------

    def _compile(self, types, backend, arch, prove: bool = True, fresh: bool = False):
        raise CompileError(f"a foreign kernel ({self.origin}) is not compiled by fearless",
                           kernel=self.name, help="its code is the one it was made from "
                                                  "(kernel.ptx, kernel.cubin)")

    @user_facing
    def inspect(self, stage: str, types: tuple = (), arch: str = "sm_90") -> str:
        """The kernel's PTX (``stage="ptx"``); other stages do not exist for foreign code
        (CompileError)."""
        if stage == "ptx" and self.ptx is not None:
            return self.ptx
        raise CompileError(f"a foreign kernel ({self.origin}) has no '{stage}' stage to show",
                           kernel=self.name, help="kernel.ptx holds its PTX, kernel.cubin "
                                                  "its cubin")

    def _entry(self, args, tensors, backend: str, prove: bool = True) -> _Entry:
        types = self._types(args, tensors, backend)
        for p, ty in zip(self._params, types):
            if isinstance(ty, T.Array) and not ty.contiguous:
                raise ArgumentTypeError("is not C-contiguous: a foreign entry takes a pointer "
                                        "and extents", kernel=self.name, param=p.name,
                                        help="pass a contiguous copy")
        loaded = self._load() if backend == "cuda" else None
        return _Entry(types, [p.name for p in self._params], self._code, loaded)

    def _load(self):
        """The code loaded on the GPU, once; its parameter layout checked against the
        declaration (CompileError) and used to pack the arguments."""
        with self._lock:
            if self._loaded is None:
                code = self.cubin if self.cubin is not None else \
                    ptx_to_cubin(self.ptx, device.cuda_arch(), self.name)
                loaded = load(self.name, code, None)
                found = [EntryParam(f"#{k}", size, BITS, f"{size} bytes", offset)
                         for k, (offset, size) in enumerate(param_layout(loaded))]
                compare(self.name, found, self._expected(), "the loaded entry",
                        self.c_signature)
                self.entry_checked = True
                if self.contract is not None and \
                        self.contract.shared_range[1] > contracts.SHARED_LIMIT:
                    allow_dynamic_shared(loaded, self.contract.shared_range[1])
                loaded.params = pack.ParamBuffer(self.abi, [f.offset for f in found])
                self._loaded = loaded
        return self._loaded

    def _require_unsafe(self) -> None:
        if not in_unsafe():
            raise SafetyError(f"a foreign kernel ({self.origin}): fearless cannot check its "
                              f"code, so a launch needs `with fl.unsafe():`",
                              kernel=self.name,
                              help="check that it writes only its own element of each "
                                   "DisjointSlice and stays in bounds, then launch it inside "
                                   "`with fl.unsafe():`")

    def _call(self, launch, *args, **kwargs) -> None:
        try:
            self._require_unsafe()
        except FearlessError as exc:
            hide_internal_frames(exc)
            raise
        Kernel._call(self, launch, *args, **kwargs)

    def _checked(self, launch, args, checked: bool):
        self._require_unsafe()  # .op() and launch_raw come here without _call
        return super()._checked(launch, args, checked)

    def _cpu_enqueue(self, launch, entry: _Entry, args, tensors):
        self._scalars(entry, args)  # scalars that do not fit are refused first
        if ahead.compiling_ahead():
            return lambda stream: None  # `fearless compile`: nothing runs
        deferred = "" if self.entry_checked else \
            " (its parameter layout is checked when it is loaded on a GPU)"
        raise LaunchError(f"a foreign kernel ({self.origin}) cannot run on the cpu backend: "
                          f"fearless cannot interpret its code{deferred}", kernel=self.name,
                          help="every host check passed; run it on the cuda backend")


def _check_name(name) -> None:
    if not isinstance(name, str) or not name.isidentifier():
        raise CompileError(f"a foreign kernel's name must be its entry's name, an identifier; "
                           f"got {name!r}")


def _arch(kernel: str, arch: str | None) -> str:
    if arch is None:
        arch = device.cuda_arch() if device.cuda_probe()[0] else NO_GPU_ARCH
    if not isinstance(arch, str) or not re.fullmatch(r"sm_\d{2,3}[af]?", arch):
        raise CompileError(f"arch= takes a GPU target such as 'sm_90', got {arch!r}",
                           kernel=kernel)
    return arch


@user_facing
def cuda(source: str, name: str, *, params, contract: Contract | None = None,
         arch: str | None = None, options=()) -> ForeignKernel:
    """A kernel from CUDA C++ ``source`` whose ``extern "C" __global__`` function ``name``
    takes ``params`` (name -> SIMT annotation, in order) as the module docstring's ABI says.
    Compiled now with NVRTC to PTX for ``arch`` (default: the GPU's, else sm_80) with the extra
    NVRTC ``options``. Raises BackendError (no NVRTC), CompileError (the source does not
    compile, or its entry disagrees with ``params``), ContractError (``contract``)."""
    _check_name(name)
    if not isinstance(source, str):
        raise CompileError(f"fl.foreign.cuda takes the CUDA source as a str, got "
                           f"{type(source).__name__}", kernel=name)
    P.declare(name, params)  # a bad declaration is refused before compiling
    arch = _arch(name, arch)
    text = nvrtc.to_ptx(name, source, arch, tuple(options))
    return ForeignKernel(name, params, contract, ptx=text, origin=f"CUDA C++ for {arch}")


@user_facing
def ptx(text: str | bytes, name: str, *, params, contract: Contract | None = None
        ) -> ForeignKernel:
    """A kernel from PTX ``text`` whose ``.entry name`` takes ``params`` as the module
    docstring's ABI says; the entry is checked now (CompileError), assembled for the GPU at
    the first launch there."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode()
    return ForeignKernel(name, params, contract, ptx=text, origin="PTX")


@user_facing
def cubin(data: bytes | str | os.PathLike, name: str, *, params,
          contract: Contract | None = None) -> ForeignKernel:
    """A kernel from a cubin (its bytes, or the path of a ``.cubin`` file) whose entry ``name``
    takes ``params`` as the module docstring's ABI says. Its parameter layout is checked when
    it is loaded on the GPU (CompileError at the first launch there)."""
    _check_name(name)
    if isinstance(data, (str, os.PathLike)):
        with open(data, "rb") as f:
            data = f.read()
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise CompileError(f"fl.foreign.cubin takes bytes or a path, got {type(data).__name__}",
                           kernel=name)
    return ForeignKernel(name, params, contract, cubin=bytes(data), origin="a cubin")
