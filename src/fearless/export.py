"""``fearless export``: a SIMT kernel compiled ahead of time for C and C++ callers.

    fearless export examples/saxpy.py:saxpy --arch sm_80 --arch sm_90 -o out/

writes ``out/saxpy.sm_80.cubin``, ``out/saxpy.sm_90.cubin`` and ``out/saxpy.h``: one C99 header
(the CUDA driver API's ``cuda.h`` and ``-lcuda``, nothing of Python) with the cubins embedded and

    fl_saxpy_kernel k;                       (the loaded module, its error word, a message)
    fl_saxpy_load(&k)                        picks the cubin for the current context's device
    fl_saxpy_args a = {...};                 scalars by value, arrays as CUdeviceptr + shape
    fl_saxpy_launch(&k, &a, size, stream)    the launch contract's checks, then cuLaunchKernel
    fl_saxpy_check(&k, stream)               synchronises; FL_ERR_BOUNDS for a bounds error
    fl_saxpy_unload(&k)

Each function returns ``FL_OK`` or an ``FL_ERR_*`` code, and leaves a message naming the kernel
and the parameter in ``k.message``, instead of launching. ``fl_saxpy_launch`` checks what a
Python launch checks on the host: the problem size and the grid against the device limits, a
null pointer for a non-empty array, negative extents, a written array overlapping another
argument's bytes, the contract's ``requires`` relations (the same arithmetic: ``//`` floors),
and that the launch covers every element of each DisjointSlice. The arrays are the
specialisation's: C-contiguous, of the dtypes and ranks the ``--signature`` gives; the block is
fixed at export (the contract's exact block, ``--block``, or the default of ``prepare``). The
cubin is the fully checked one (no bounds proof that needs a precondition at launch), so a
read out of bounds is skipped on the device and reported by ``fl_saxpy_check``, as a Python
launch reports it at the next synchronisation.

One error word per loaded kernel: check after each stream's work, or load one kernel object
per stream. The requirement arithmetic is Python's on 64 bits: a value past them (or a zero
divisor) refuses the launch. A cubin runs on its major capability at its minor or above (no PTX
is embedded: export for each major the callers have).

Not exported (``ExportError`` says which): tile kernels, dynamic shared memory, static shared
arrays over 48 KB, 16-bit float scalars in ``requires``, parameter names that C or the header
takes, kernels whose cubins for two archs disagree on the parameter layout.
"""
from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass
from pathlib import Path

from fearless.backends.llvm.shared_pool import pooled_bytes
from fearless.compiler.abi import ERROR_WORD, EXTENT, PTR, SCALAR, STRIDE, THREADS
from fearless.errors import FearlessError
from fearless.runtime import launch as launches
from fearless.runtime.dispatch import MISALIGNED

MAX_GRID = (2**31 - 1, 65535, 65535)   # CUDA's grid limits (x, y, z) on sm_80 and later
_C_TYPES = {"bool": "uint8_t", "i8": "int8_t", "u8": "uint8_t", "i16": "int16_t",
            "u16": "uint16_t", "f16": "uint16_t", "bf16": "uint16_t", "i32": "int32_t",
            "u32": "uint32_t", "f32": "float", "i64": "int64_t", "u64": "uint64_t",
            "f64": "double"}
_SLOT_TYPES = {"B": "uint8_t", "b": "int8_t", "h": "int16_t", "H": "uint16_t", "i": "int32_t",
               "I": "uint32_t", "f": "float", "q": "int64_t", "Q": "uint64_t", "d": "double"}
STATUS = ("FL_OK", "FL_ERR_SIZE", "FL_ERR_GRID", "FL_ERR_NULL", "FL_ERR_SHAPE", "FL_ERR_ALIAS",
          "FL_ERR_REQUIRES", "FL_ERR_COVERAGE", "FL_ERR_DRIVER", "FL_ERR_BOUNDS",
          "FL_ERR_DEVICE", "FL_ERR_ALIGN")


class ExportError(FearlessError):
    """A kernel, signature or option that ``fearless export`` cannot turn into a C launcher."""


@dataclass
class Exported:
    """What one export wrote: the header and the cubin per arch."""

    header: Path
    cubins: dict


def export(kernel, types: tuple, archs: list[str], out_dir, block=None) -> Exported:
    """Compile SIMT ``kernel`` for ``types`` (its runtime parameters' IR types, as
    ``targets.param_types`` gives them) for each of ``archs`` and write the cubins and the C header
    into ``out_dir``. ``block``: the block (an int or one per axis) when the kernel's contract
    does not fix it. Raises ExportError for what the module docstring lists, ContractError for a
    block the contract refuses, CompileError as a launch would."""
    from fearless.kernel.simt import Kernel
    if not isinstance(kernel, Kernel):
        raise ExportError("only SIMT kernels (@fl.kernel) can be exported so far",
                          kernel=getattr(kernel, "name", None),
                          help="tile kernels come next; call them from Python meanwhile")
    if not archs:
        raise ExportError("export needs at least one --arch", kernel=kernel.name)
    for arch in archs:
        if not re.fullmatch(r"sm_\d{2,3}a?", arch):
            raise ExportError(f"--arch {arch}: expected sm_XY or sm_XYa, e.g. sm_90",
                              kernel=kernel.name)
    dims = kernel.contract.dims if kernel.contract else (kernel.index_space or 1)
    blk = _block(kernel, dims, block)
    compiled = {arch: kernel._compile(types, "cuda", arch, prove=False) for arch in archs}
    infos = {arch: c.info for arch, c in compiled.items()}
    first = infos[archs[0]]
    for arch, info in infos.items():
        if info.abi != first.abi or info.params != first.params or \
                info.coverage != first.coverage or info.coarsen != first.coarsen:
            raise ExportError(f"the {arch} and {archs[0]} cubins take different parameters",
                              kernel=kernel.name, help="export each arch on its own")
    _supported(kernel, first, blk, dims)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cubins = {}
    for arch, c in compiled.items():
        cubins[arch] = out / f"{kernel.name}.{arch}.cubin"
        cubins[arch].write_bytes(c.cubin)
    header = out / f"{kernel.name}.h"
    header.write_text(header_text(kernel, first, dims, blk,
                                  {arch: c.cubin for arch, c in compiled.items()}))
    return Exported(header, cubins)


def _block(kernel, dims: int, block) -> tuple:
    """The block of every launch, as ``prepare`` would take it (launch.plan's checks: the
    contract's dims and block, the kernel's index space, the per-axis limits of sm_80+)."""
    given = None if block is None else tuple(block if isinstance(block, (tuple, list))
                                             else (block,))
    prepared = launches.plan(kernel, kernel._launch_space, (1,) * dims, given, "cpu", None,
                             kernel.contract)
    return prepared.block


# C (to C23) and C++ (to C++23) keywords and alternative tokens, and the macros GNU modes
# predefine: a parameter becomes a struct member of that name
_RESERVED = frozenset("""auto break case char const continue default do double else enum extern
float for goto if inline int long register restrict return short signed sizeof static struct
switch typedef union unsigned void volatile while alignas alignof bool constexpr false nullptr
static_assert thread_local true typeof typeof_unqual catch class delete friend mutable
namespace new operator private protected public template this throw try typename using virtual
char8_t char16_t char32_t concept consteval constinit co_await co_return co_yield decltype
dynamic_cast explicit export noexcept reinterpret_cast requires static_cast const_cast typeid
wchar_t and and_eq bitand bitor compl not not_eq or or_eq xor xor_eq linux unix i386
_Bool _Complex _Imaginary _Alignas _Alignof _Atomic _Generic _Noreturn _Static_assert
_Thread_local""".split())


def _supported(kernel, info, block: tuple, dims: int) -> None:
    name = kernel.name
    names = {q.name for q in info.params}
    for q in info.params:
        if q.name in _RESERVED:
            raise ExportError(f"the parameter name '{q.name}' is a C or C++ keyword",
                              kernel=name, param=q.name,
                              help="rename the parameter to export the kernel")
        if q.is_array and (f"{q.name}_shape" in names or f"{q.name}_bytes" in names):
            raise ExportError(f"the parameter names '{q.name}' and '{q.name}_shape' (or "
                              f"'_bytes') collide in C", kernel=name, param=q.name)
        if q.is_array and q.disjoint and q.name not in info.covered() and q.ndim != dims:
            raise ExportError(f"'{q.name}' is a {q.ndim}-d DisjointSlice of a {dims}-d launch: "
                              f"elements outside the launch would never be written, so every "
                              f"launch would be refused", kernel=name, param=q.name)
    if any(shape is None for _, shape, _ in info.shared) or \
            (kernel.contract is not None and kernel.contract.shared_range[1] > 0):
        raise ExportError("kernels with dynamic shared memory are not exported yet", kernel=name)
    pooled = pooled_bytes(info.shared)   # the arrays' real layout: each 16-byte aligned
    if pooled:
        raise ExportError(f"{pooled} bytes of static shared memory (over 48 KB, so they live in "
                          f"dynamic shared memory) are not exported yet", kernel=name)
    params = {q.name: q for q in info.params}
    for r in kernel.contract.requires if kernel.contract is not None else ():
        for node in ast.walk(r.tree):
            if isinstance(node, ast.Constant) and abs(node.value) > 2**63 - 1:
                raise ExportError(f"requires `{r.text}`: {node.value} does not fit 64 bits",
                                  kernel=name)
            if isinstance(node, ast.Name) and node.id in params and \
                    params[node.id].dtype.name in ("f16", "bf16"):
                raise ExportError(f"requires `{r.text}` takes the 16-bit float '{node.id}', "
                                  f"which is not exported yet", kernel=name, param=node.id)
            if isinstance(node, ast.Call) and not params[node.args[0].id].is_array:
                raise ExportError(f"requires `{r.text}` takes len() of the scalar "
                                  f"'{node.args[0].id}'", kernel=name)
            if isinstance(node, ast.Name) and node.id in params and params[node.id].is_array \
                    and not _is_len_argument(r.tree, node):
                raise ExportError(f"requires `{r.text}` uses the array '{node.id}' as a number",
                                  kernel=name, help=f"write len({node.id})")
    if info.warp_full and math.prod(block) % 32:
        raise ExportError(f"the kernel uses warp operations over all 32 lanes, but the block "
                          f"{block} is not whole warps", kernel=name)


def _is_len_argument(tree, name) -> bool:
    return any(isinstance(n, ast.Call) and n.args and n.args[0] is name for n in ast.walk(tree))


# -- the header --------------------------------------------------------------------------------
def header_text(kernel, info, dims: int, block: tuple, cubins: dict) -> str:
    """The C header of one exported kernel (see the module docstring)."""
    n = kernel.name
    p = f"fl_{n}"
    arrays = [(k, q) for k, q in enumerate(info.params) if q.is_array]
    lines = [f"/* {n}.h: the fearless kernel '{n}', compiled ahead of time for "
             f"{', '.join(cubins)}.", " * Generated by `fearless export`; see "
             "fearless/export.py for the contract. */",
             f"#ifndef FL_EXPORT_{n}_H", f"#define FL_EXPORT_{n}_H", "",
             "#include <stddef.h>", "#include <stdint.h>", "#include <stdio.h>",
             "#include <string.h>", "#include <cuda.h>", "", _COMMON, ""]
    lines += _cubin_arrays(p, cubins)
    lines += ["/* the launch arguments: scalars by value; arrays C-contiguous, a device pointer "
              "and the extents (rows first) */", "typedef struct {"]
    for q in info.params:
        if q.is_array:
            const = "" if q.written else "const "
            lines.append(f"    CUdeviceptr {q.name};   /* {const}{q.dtype.name}[{q.ndim}-d] */")
            lines.append(f"    int64_t {q.name}_shape[{q.ndim}];")
        else:
            lines.append(f"    {_C_TYPES[q.dtype.name]} {q.name};"
                         + ("   /* the bits of a 16-bit float */"
                            if q.dtype.name in ("f16", "bf16") else ""))
    lines += [f"}} {p}_args;", ""]
    lines += ["/* the kernel's parameters in its ABI (each slot naturally aligned, as the PTX "
              ".param space) */", "typedef struct {"]
    lines += [f"    {_SLOT_TYPES[s.code]} s{i};   /* {_slot_doc(s, info)} */"
              for i, s in enumerate(info.abi.slots)]
    lines += [f"}} {p}_params;", ""]
    lines += ["typedef struct {", "    CUmodule module;", "    CUfunction function;",
              "    CUdeviceptr error_word;   /* 32 bytes: site * 8 + axis, index (i64 each) */",
              "    char message[512];", f"}} {p}_kernel;", ""]
    lines += _load(p, n, info, kernel, block, cubins)
    lines += _launch(p, n, info, dims, block, arrays, kernel)
    lines += _check(p, n, info)
    lines += [f"#endif /* FL_EXPORT_{n}_H */", ""]
    return "\n".join(lines)


_COMMON = """#ifndef FL_EXPORT_COMMON
#define FL_EXPORT_COMMON
enum { """ + ", ".join(f"{s} = {i}" for i, s in enumerate(STATUS)) + """ };

/* a requirement's arithmetic, as Python's exact integers give it; *bad set where 64 bits
   cannot hold the result (the launch is refused) or on a zero divisor */
static inline int64_t fl__add(int64_t a, int64_t b, int *bad) {
    if ((b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b)) { *bad = 1; return 0; }
    return a + b;
}
static inline int64_t fl__sub(int64_t a, int64_t b, int *bad) {
    if ((b < 0 && a > INT64_MAX + b) || (b > 0 && a < INT64_MIN + b)) { *bad = 1; return 0; }
    return a - b;
}
static inline int64_t fl__mul(int64_t a, int64_t b, int *bad) {
    if (a == 0 || b == 0) return 0;
    if ((a == -1 && b == INT64_MIN) || (b == -1 && a == INT64_MIN) ||
        (a > 0 ? (b > 0 ? a > INT64_MAX / b : b < INT64_MIN / a)
               : (b > 0 ? a < INT64_MIN / b : a < INT64_MAX / b))) { *bad = 1; return 0; }
    return a * b;
}
static inline int64_t fl__neg(int64_t a, int *bad) {
    if (a == INT64_MIN) { *bad = 1; return 0; }
    return -a;
}
/* floor division as Python's // */
static inline int64_t fl__floordiv(int64_t a, int64_t b, int *bad) {
    if (b == 0 || (a == INT64_MIN && b == -1)) { *bad = 1; return 0; }
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
/* int(v) of a float scalar; *bad for NaN or a value past 64 bits */
static inline int64_t fl__int(double v, int *bad) {
    if (!(v >= -9223372036854775808.0 && v < 9223372036854775808.0)) { *bad = 1; return 0; }
    return (int64_t)v;
}
/* a u64 scalar as a signed 64-bit number; *bad past INT64_MAX */
static inline int64_t fl__u64(uint64_t v, int *bad) {
    if (v > (uint64_t)INT64_MAX) { *bad = 1; return 0; }
    return (int64_t)v;
}

/* whether [a, a + na) and [b, b + nb) share a byte (empty ranges share none; written so that
   no sum wraps past 2^64) */
static inline int fl__overlap(CUdeviceptr a, uint64_t na, CUdeviceptr b, uint64_t nb) {
    return na && nb && (a < b ? b - a < na : a - b < nb);
}
#endif"""


def _cubin_arrays(p: str, cubins: dict) -> list[str]:
    lines = []
    for arch, data in cubins.items():
        lines.append(f"static const unsigned char {p}_{arch}[{len(data)}] = {{")
        for i in range(0, len(data), 24):
            lines.append("    " + ",".join(str(b) for b in data[i:i + 24]) + ",")
        lines.append("};")
    lines.append("")
    return lines


def _slot_doc(slot, info) -> str:
    if slot.kind == ERROR_WORD:
        return "the bounds-error word's address"
    if slot.kind == THREADS:
        return "threads of the coarsened axis"
    name = info.params[slot.param].name
    return {PTR: f"{name}: pointer", EXTENT: f"{name}: extent {slot.axis}",
            STRIDE: f"{name}: stride {slot.axis} (elements)", SCALAR: name}[slot.kind]


def _load(p: str, n: str, info, kernel, block: tuple, cubins: dict) -> list[str]:
    need = kernel.contract.min_compute_capability if kernel.contract else (0, 0)
    lines = ["/* load the cubin for the current context's device: same major capability, "
             "the highest minor at most the device's */",
             f"static inline int {p}_load({p}_kernel *k) {{",
             "    CUdevice dev; int major = 0, minor = 0;",
             "    memset(k, 0, sizeof *k);",
             "    if (cuCtxGetDevice(&dev) != CUDA_SUCCESS ||",
             "        cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "
             "dev) != CUDA_SUCCESS ||",
             "        cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "
             "dev) != CUDA_SUCCESS) {",
             f"        snprintf(k->message, sizeof k->message, \"kernel '{n}': no current CUDA "
             f"context\");",
             "        return FL_ERR_DRIVER;", "    }",
             "    const unsigned char *image = NULL; int best = -1;"]
    for arch in cubins:
        # a cubin runs on its major capability at its minor or above; an "a" (arch-specific)
        # cubin on exactly its own, and is preferred there
        digits = re.fullmatch(r"sm_(\d+)(a?)", arch)
        if digits is None:
            raise ExportError(f"--arch {arch}: expected sm_XY or sm_XYa, e.g. sm_90")
        cc, exact = int(digits.group(1)), bool(digits.group(2))
        score = 2 * (cc % 10) + exact
        fits = f"{cc % 10} == minor" if exact else f"{cc % 10} <= minor"
        lines.append(f"    if (major == {cc // 10} && {fits} && {score} > best) "
                     f"{{ image = {p}_{arch}; best = {score}; }}")
    lines += [
        "    if (image == NULL) {",
        f"        snprintf(k->message, sizeof k->message, \"kernel '{n}': no cubin for "
        f"sm_%d%d (exported for {', '.join(cubins)})\", major, minor);",
        "        return FL_ERR_DEVICE;", "    }"]
    if need != (0, 0):
        lines += [f"    if (major * 10 + minor < {need[0] * 10 + need[1]}) {{",
                  f"        snprintf(k->message, sizeof k->message, \"kernel '{n}': the contract "
                  f"needs compute capability {need[0]}.{need[1]}\");",
                  "        return FL_ERR_DEVICE;", "    }"]
    threads = math.prod(block)
    lines += [
        "    int most = 0;",
        "    if (cuModuleLoadData(&k->module, image) != CUDA_SUCCESS ||",
        f"        cuModuleGetFunction(&k->function, k->module, \"{n}\") != CUDA_SUCCESS ||",
        "        cuFuncGetAttribute(&most, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, k->function)"
        " != CUDA_SUCCESS) {",
        f"        snprintf(k->message, sizeof k->message, \"kernel '{n}': loading its cubin "
        f"failed\");",
        "        return FL_ERR_DRIVER;", "    }",
        f"    if (most < {threads}) {{",
        f"        snprintf(k->message, sizeof k->message, \"kernel '{n}': the cubin allows %d "
        f"threads per block, the block {block} has {threads}\", most);",
        f"        {p}_unload(k);",
        "        return FL_ERR_DEVICE;", "    }"]
    if info.bounds_sites:
        lines += ["    if (cuMemAlloc(&k->error_word, 32) != CUDA_SUCCESS ||",
                  "        cuMemsetD8(k->error_word, 0, 32) != CUDA_SUCCESS) {",
                  f"        snprintf(k->message, sizeof k->message, \"kernel '{n}': allocating "
                  f"its error word failed\");",
                  f"        {p}_unload(k);",
                  "        return FL_ERR_DRIVER;", "    }"]
    lines += ["    return FL_OK;", "}", ""]
    unload = [f"static inline void {p}_unload({p}_kernel *k) {{",
              "    if (k->error_word) cuMemFree(k->error_word);",
              "    if (k->module) cuModuleUnload(k->module);",
              "    k->module = NULL; k->error_word = 0;", "}", ""]
    return unload + lines


def _fail(n: str, code: str, param: str | None, fmt: str, *values: str,
          indent: int = 8) -> list[str]:
    """C lines that write the message (naming the kernel and the parameter) and return
    ``code``; ``fmt`` a printf format over ``values``."""
    where = f"kernel '{n}', parameter '{param}'" if param else f"kernel '{n}'"
    extra = "".join(f", {v}" for v in values)
    pad = " " * indent
    return [f"{pad}snprintf(k->message, sizeof k->message, \"{where}: {fmt}\"{extra});",
            f"{pad}return {code};"]


def _launch(p: str, n: str, info, dims: int, block: tuple, arrays, kernel) -> list[str]:
    lines = [f"/* check the launch over the problem size size[0..{dims - 1}] (rows first), "
             f"then enqueue it on stream; block {block} */",
             f"static inline int {p}_launch({p}_kernel *k, const {p}_args *a, "
             f"const int64_t size[{dims}], CUstream stream) {{",
             f"    const unsigned block[3] = {{{', '.join(map(str, block + (1,) * (3 - dims)))}}};",
             "    uint64_t grid[3] = {1, 1, 1};",
             f"    for (int d = 0; d < {dims}; d++) {{",
             "        if (size[d] < 0) {"]
    lines += _fail(n, "FL_ERR_SIZE", None, "the problem size %lld along axis %d is negative",
                   "(long long)size[d]", "d", indent=12)
    lines += ["        }",
              f"        grid[d] = ((uint64_t)size[{dims - 1} - d] + block[d] - 1) / block[d];",
              f"        if (grid[d] > {MAX_GRID[0]}ull || (d > 0 && grid[d] > {MAX_GRID[1]}ull))"
              " {"]
    lines += _fail(n, "FL_ERR_GRID", None, "the launch needs %llu blocks along grid axis %d, "
                   "above the device limit", "(unsigned long long)grid[d]", "d", indent=12)
    lines += ["        }", "    }"]
    for _, q in arrays:
        lines += [f"    uint64_t {q.name}_bytes = {q.dtype.itemsize};",
                  f"    for (int d = 0; d < {q.ndim}; d++) {{",
                  f"        if (a->{q.name}_shape[d] < 0) {{"]
        lines += _fail(n, "FL_ERR_SHAPE", q.name, "extent %lld along axis %d is negative",
                       f"(long long)a->{q.name}_shape[d]", "d", indent=12)
        lines += ["        }",
                  f"        if (a->{q.name}_shape[d] > 0 && {q.name}_bytes > UINT64_MAX / "
                  f"(uint64_t)a->{q.name}_shape[d]) {{"]
        lines += _fail(n, "FL_ERR_SHAPE", q.name, "its extents hold more bytes than 64 bits "
                       "count", indent=12)
        lines += ["        }",
                  f"        {q.name}_bytes *= (uint64_t)a->{q.name}_shape[d];",
                  "    }",
                  f"    if ({q.name}_bytes && a->{q.name} == 0) {{"]
        lines += _fail(n, "FL_ERR_NULL", q.name, "a null pointer for %llu bytes",
                       f"(unsigned long long){q.name}_bytes")
        lines += ["    }", f"    if ({q.name}_bytes && a->{q.name} % {q.dtype.itemsize}) {{"]
        lines += _fail(n, "FL_ERR_ALIGN", q.name, f"the pointer is not a multiple of "
                       f"{q.dtype.itemsize} bytes (its dtype's size)")
        lines += ["    }"]
    for _, q in arrays:
        if not q.written:
            continue
        for _, o in arrays:
            if o is q:
                continue
            lines += [f"    if (fl__overlap(a->{q.name}, {q.name}_bytes, a->{o.name}, "
                      f"{o.name}_bytes)) {{"]
            lines += _fail(n, "FL_ERR_ALIAS", q.name, f"written, and it overlaps the memory of "
                           f"'{o.name}'; a written argument must not share memory with any "
                           f"other argument")
            lines += ["    }"]
    if kernel.contract is not None:
        for r in kernel.contract.requires:
            lines += ["    {", "        int bad = 0;",
                      f"        const int64_t lhs = {_c_expr(r.tree.left, info)}, rhs = "
                      f"{_c_expr(r.tree.comparators[0], info)};",
                      f"        if (bad || !(lhs {_C_CMP[type(r.tree.ops[0])]} rhs)) {{"]
            lines += _fail(n, "FL_ERR_REQUIRES", None, f"the launch breaks the contract's "
                           f"requirement `{_c_string(r.text)}`: %lld against %lld%s",
                           "(long long)lhs", "(long long)rhs",
                           'bad ? " (64-bit arithmetic cannot hold it, or a division by zero)"'
                           ' : ""', indent=12)
            lines += ["        }", "    }"]
    lines += _coverage(n, info, dims)
    axis = max(kernel.index_space, 1) - 1
    lines += ["    uint64_t launch_x = grid[0], launch_y = grid[1], launch_z = grid[2];"]
    if info.coarsen > 1:
        var = "launch_" + "xyz"[axis]
        lines += [f"    {var} = ({var} + {info.coarsen - 1}) / {info.coarsen};"]
    if info.abi.has(THREADS):  # the logical threads of the coarsened axis
        lines += [f"    const int64_t threads = "
                  f"{f'(int64_t)grid[{axis}] * block[{axis}]' if info.coarsen > 1 else '0'};"]
    lines += [f"    {p}_params params;", "    memset(&params, 0, sizeof params);"]
    word = "k->error_word" if info.bounds_sites else "0"
    for i, s in enumerate(info.abi.slots):
        q = info.params[s.param] if s.param >= 0 else None
        if s.kind == PTR:
            # an empty array's own pointer may be null: pass a valid one (as plan.py does)
            value = f"({q.name}_bytes ? a->{q.name} : {word})"
        elif s.kind == EXTENT:
            value = f"a->{q.name}_shape[{s.axis}]"
        elif s.kind == STRIDE:
            later = [f"a->{q.name}_shape[{j}]" for j in range(s.axis + 1, q.ndim)]
            value = " * ".join(later) if later else "1"
        elif s.kind == SCALAR:  # a bool travels as 0 or 1, as Python's converter gives it
            value = f"a->{q.name} != 0" if q.dtype.name == "bool" else f"a->{q.name}"
        elif s.kind == ERROR_WORD:
            value = word
        else:
            value = "threads"
        lines.append(f"    params.s{i} = ({_SLOT_TYPES[s.code]})({value});")
    slots = len(info.abi.slots)
    lines += [f"    void *pointers[{max(slots, 1)}] = {{"
              + ", ".join(f"&params.s{i}" for i in range(slots)) + "};",
              "    if (launch_x == 0 || launch_y == 0 || launch_z == 0) return FL_OK;  "
              "/* an empty problem: nothing to run */",
              "    if (cuLaunchKernel(k->function, (unsigned)launch_x, (unsigned)launch_y, "
              "(unsigned)launch_z, block[0], block[1], block[2], 0, stream, pointers, NULL) "
              "!= CUDA_SUCCESS) {"]
    lines += _fail(n, "FL_ERR_DRIVER", None, "cuLaunchKernel failed")
    lines += ["    }", "    return FL_OK;", "}", ""]
    return lines


_C_CMP = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">",
          ast.GtE: ">="}
_C_ARITH = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.FloorDiv: "floordiv"}


def _c_expr(node, info) -> str:
    """A requirement's side (contract.py's grammar) as a C int64 expression over ``a``."""
    params = {q.name: q for q in info.params}
    if isinstance(node, ast.Constant):
        return f"(int64_t){node.value}LL" if node.value != -2**63 else "INT64_MIN"
    if isinstance(node, ast.Name):
        q = params[node.id]
        if q.dtype.name in ("f32", "f64"):
            return f"fl__int((double)a->{q.name}, &bad)"
        if q.dtype.name == "u64":
            return f"fl__u64(a->{q.name}, &bad)"
        if q.dtype.name == "bool":
            return f"(int64_t)(a->{q.name} != 0)"
        return f"(int64_t)a->{q.name}"
    if isinstance(node, ast.Call):
        q = params[node.args[0].id]
        return f"a->{q.name}_shape[0]" if q.ndim > 0 else "(int64_t)1"
    if isinstance(node, ast.UnaryOp):
        return f"fl__neg({_c_expr(node.operand, info)}, &bad)"
    left, right = _c_expr(node.left, info), _c_expr(node.right, info)
    return f"fl__{_C_ARITH[type(node.op)]}({left}, {right}, &bad)"


def _c_literal(text: str) -> str:
    """``text`` inside a C string literal."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _c_string(text: str) -> str:
    """``text`` inside a C string literal used as a printf format."""
    return _c_literal(text).replace("%", "%%")


def _coverage(n: str, info, dims: int) -> list[str]:
    """Every element of a DisjointSlice belongs to a thread (launch.check_coverage)."""
    owned, lines = info.covered(), []
    for q in info.params:
        if not (q.is_array and q.disjoint):
            continue
        if q.name in owned:
            cover = owned[q.name]
            if cover is None:
                continue
            for axis, (g, per) in enumerate(cover):
                if per == math.inf:
                    continue
                reach = f"(int64_t)grid[{g}] * {per}" if g is not None else f"(int64_t){per}"
                lines += [f"    if (a->{q.name}_shape[{axis}] > {reach}) {{"]
                lines += _fail(n, "FL_ERR_COVERAGE", q.name, f"the launch writes %lld elements "
                               f"along axis {axis}, but it has %lld; elements outside would "
                               f"never be written", f"(long long)({reach})",
                               f"(long long)a->{q.name}_shape[{axis}]")
                lines += ["    }"]
            continue
        if q.ndim != dims:
            lines += ["    {"] + _fail(n, "FL_ERR_COVERAGE", q.name, f"a {q.ndim}-d output of "
                                       f"a {dims}-d launch: elements outside the launch would "
                                       f"never be written") + ["    }"]
            continue
        for axis in range(dims):
            lines += [f"    if (a->{q.name}_shape[{axis}] > size[{axis}]) {{"]
            lines += _fail(n, "FL_ERR_COVERAGE", q.name, f"the launch covers %lld along axis "
                           f"{axis}, but it has %lld; elements outside the launch would never "
                           f"be written", f"(long long)size[{axis}]",
                           f"(long long)a->{q.name}_shape[{axis}]")
            lines += ["    }"]
    return lines


def _check(p: str, n: str, info) -> list[str]:
    lines = ["/* synchronise stream and report the first bounds error of the launches since "
             "the last check (the read was skipped and gave 0 on the device) */",
             f"static inline int {p}_check({p}_kernel *k, CUstream stream) {{",
             "    if (cuStreamSynchronize(stream) != CUDA_SUCCESS) {"]
    lines += _fail(n, "FL_ERR_DRIVER", None, "the stream failed (an earlier kernel may have "
                   "faulted; `fearless sanitize` finds it)")
    lines += ["    }"]
    if not info.bounds_sites:
        return lines + ["    return FL_OK;", "}", ""]
    sites = ", ".join(f"\"{q} (line {s.line}: {_c_literal(s.text.strip())})\""
                      for q, s in info.bounds_sites)
    lines += [f"    static const char *const sites[{len(info.bounds_sites)}] = {{{sites}}};",
              "    int64_t word[4];",
              "    if (cuMemcpyDtoH(word, k->error_word, sizeof word) != CUDA_SUCCESS) {"]
    lines += _fail(n, "FL_ERR_DRIVER", None, "reading its error word failed")
    lines += ["    }",
              "    if (word[0] == 0) return FL_OK;",
              "    cuMemsetD8(k->error_word, 0, 32);",
              "    const int64_t site = word[0] / 8, axis = word[0] % 8;",
              f"    if (site < 1 || site > {len(info.bounds_sites)}) {{"]
    lines += _fail(n, "FL_ERR_BOUNDS", None, "a bounds error at an unknown site %lld",
                   "(long long)site")
    lines += ["    }",
              f"    if (axis == {MISALIGNED}) {{  /* the device wrote offset * 32 + alignment */"]
    lines += _fail(n, "FL_ERR_BOUNDS", None, "misaligned access at %s: address offset %lld is "
                   "not a multiple of %lld bytes; it was skipped", "sites[site - 1]",
                   "(long long)(word[1] / 32)", "(long long)(word[1] % 32)")
    lines += ["    }"]
    lines += _fail(n, "FL_ERR_BOUNDS", None, "read out of bounds of %s: index %lld along axis "
                   "%lld; the read was skipped and gave 0", "sites[site - 1]",
                   "(long long)word[1]", "(long long)axis", indent=4)
    return lines + ["}", ""]
