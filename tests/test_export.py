"""``fearless export``: the C header of a SIMT kernel compiled ahead of time.

On any machine with a C compiler and the CUDA driver API's header (the nvidia wheel's or a
toolkit's): the header compiles warning-free as C99, and a test program linked against a stand-in
driver (the few ``cu*`` functions the header calls, recording instead of launching) shows that a
good launch packs the same parameter bytes as the Python launcher and computes the same grid,
and that every broken launch contract returns its code and a message naming the kernel and the
parameter without launching. On the GPU the exported saxpy runs from C and is checked against
NumPy."""
from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fearless as fl
from fearless import cli, export
from fearless.compiler.abi import ERROR_WORD
from fearless.dtypes import f32, i32
from fearless.runtime import pack
from fearless.runtime.args import HI, LO, OBJ, PTR, SHAPE, STRIDES

ROOT = Path(__file__).resolve().parents[1]


@fl.kernel(contract=fl.Contract(dims=2, block=(16, 8),
                                requires=("len(bias) >= cols // 2 - 1",)))
def shifted(x: fl.Array[f32, 2], bias: fl.Slice[f32], cols: i32,
            out: fl.DisjointArray[f32, 2]):
    r, c = fl.thread.index_2d()
    if r < out.shape[0] and c < out.shape[1]:
        out[r, c] = x[r, c] + bias[c // 2]


@fl.kernel(contract=fl.Contract(dims=1, block=128, requires=("n * m <= len(x)",)))
def gated(x: fl.Slice[f32], on: fl.bool_, n: fl.i64, m: fl.i64, out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = x[i] if on else 0.0


@fl.kernel(contract=fl.Contract(dims=2, block=(32, 8)))
def one_d_in_two(out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = 1.0


@fl.kernel
def keyword(int: fl.i32, out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = 1.0


def _cuda_include() -> Path | None:
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations if spec else []):
        for header in Path(root).glob("*/include/cuda.h"):
            return header.parent
    for root in ("/usr/local/cuda/include",):
        if Path(root, "cuda.h").is_file():
            return Path(root)
    return None


CC, CXX, INCLUDE = shutil.which("cc"), shutil.which("c++"), _cuda_include()
needs_c = pytest.mark.skipif(CC is None or INCLUDE is None,
                             reason="needs a C compiler and the CUDA driver API's cuda.h")

# the driver functions the header calls, recording: loads succeed on an sm_90 device, launches
# print their grid, block and parameter bytes, the error word holds WORD
MOCK = r"""
#include <stdio.h>
static int64_t WORD[4];
CUresult CUDAAPI cuCtxGetDevice(CUdevice *d) { *d = 0; return CUDA_SUCCESS; }
CUresult CUDAAPI cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d) {
    (void)d; *v = a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR ? 9 : 0; return CUDA_SUCCESS; }
CUresult CUDAAPI cuModuleLoadData(CUmodule *m, const void *image) {
    (void)image; *m = (CUmodule)1; return CUDA_SUCCESS; }
CUresult CUDAAPI cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
    (void)m; printf("function %s\n", name); *f = (CUfunction)2; return CUDA_SUCCESS; }
CUresult CUDAAPI cuFuncGetAttribute(int *v, CUfunction_attribute a, CUfunction f) {
    (void)a; (void)f; *v = 1024; return CUDA_SUCCESS; }
CUresult CUDAAPI cuMemAlloc(CUdeviceptr *p, size_t n) { (void)n; *p = 0x7000; return CUDA_SUCCESS; }
CUresult CUDAAPI cuMemsetD8(CUdeviceptr p, unsigned char v, size_t n) {
    (void)p; (void)v; (void)n; return CUDA_SUCCESS; }
CUresult CUDAAPI cuMemFree(CUdeviceptr p) { (void)p; return CUDA_SUCCESS; }
CUresult CUDAAPI cuModuleUnload(CUmodule m) { (void)m; return CUDA_SUCCESS; }
CUresult CUDAAPI cuStreamSynchronize(CUstream s) { (void)s; return CUDA_SUCCESS; }
CUresult CUDAAPI cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t n) {
    (void)src; memcpy(dst, WORD, n); return CUDA_SUCCESS; }
CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                unsigned bx, unsigned by, unsigned bz, unsigned shared,
                                CUstream s, void **params, void **extra) {
    (void)f; (void)s; (void)extra;
    printf("cuLaunchKernel %u %u %u %u %u %u %u ", gx, gy, gz, bx, by, bz, shared);
    const unsigned char *bytes = (const unsigned char *)params[0];
    for (size_t i = 0; i < PARAM_BYTES; i++) printf("%02x", bytes[i]);
    printf("\n");
    return CUDA_SUCCESS;
}
static void report(const char *what, int code, const char *message) {
    printf("%s %d %s\n", what, code, code ? message : "");
}
"""


def _run_c(tmp_path: Path, header: Path, kernel: str, body: str) -> list[str]:
    """Compile ``body`` (main's statements, ``k`` a loaded kernel) with the header and the
    stand-in driver; return the program's output lines."""
    source = tmp_path / "main.c"
    source.write_text(f'#include "{header.name}"\n#define PARAM_BYTES sizeof(fl_{kernel}_params)\n'
                      f"{MOCK}\nint main(void) {{\n    fl_{kernel}_kernel k;\n"
                      f"    report(\"load\", fl_{kernel}_load(&k), k.message);\n{body}\n"
                      f"    fl_{kernel}_unload(&k);\n    return 0;\n}}\n")
    exe = tmp_path / "main"
    build = subprocess.run([CC, "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic",
                            f"-I{header.parent}", "-isystem", str(INCLUDE), str(source), "-o", str(exe)],
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    return subprocess.run([str(exe)], capture_output=True, text=True, check=True
                          ).stdout.splitlines()


def _expected_params(info, views: list, word: int, threads: int) -> str:
    """The Python launcher's parameter bytes (pack.ParamBuffer) for the same arguments."""
    buffer = pack.ParamBuffer(info.abi)
    buffer.fill(views, word, threads)
    return bytes(buffer.buffer)[:buffer.struct.size].hex()


def _view(ptr: int, shape: tuple) -> tuple:
    strides = tuple(int(np.prod(shape[k + 1:])) for k in range(len(shape)))
    v = [None] * 8
    v[PTR], v[SHAPE], v[STRIDES], v[LO], v[HI], v[OBJ] = ptr, shape, strides, ptr, ptr + 4, None
    return tuple(v)


@pytest.fixture(scope="module")
def saxpy_header(tmp_path_factory):
    saxpy = importlib.import_module("examples.saxpy").saxpy
    out = tmp_path_factory.mktemp("saxpy")
    exported = export.export(saxpy, cli.param_types(saxpy, {}), ["sm_80", "sm_90"], out)
    info = saxpy._compile(cli.param_types(saxpy, {}), "cuda", "sm_90", prove=False).info
    return exported, info


def test_export_writes_a_cubin_per_arch_and_a_header(saxpy_header):
    exported, _ = saxpy_header
    assert sorted(exported.cubins) == ["sm_80", "sm_90"]
    for arch, path in exported.cubins.items():
        assert path.read_bytes()[:4] == b"\x7fELF", arch
    text = exported.header.read_text()
    assert "fl_saxpy_launch" in text and "fl_saxpy_sm_90[" in text and "fl_saxpy_sm_80[" in text


@needs_c
def test_a_good_launch_packs_what_python_packs(saxpy_header, tmp_path):
    exported, info = saxpy_header
    n = 1000
    lines = _run_c(tmp_path, exported.header, "saxpy", f"""
    fl_saxpy_args a = {{1.5f, 0x10000, {{{n}}}, 0x20000, {{{n}}}, 0x30000, {{{n}}}}};
    int64_t size[1] = {{{n}}};
    report("launch", fl_saxpy_launch(&k, &a, size, NULL), k.message);""")
    assert lines[0] == "function saxpy" and lines[1] == "load 0 "
    assert lines[2].startswith("cuLaunchKernel ")
    words = lines[2].split()
    grid, block = [int(v) for v in words[1:4]], [int(v) for v in words[4:7]]
    threads = -(-n // 256) * 256
    assert block == [256, 1, 1] and grid == [-(-threads // 256 // info.coarsen), 1, 1]
    word = 0x7000 if any(s.kind == ERROR_WORD for s in info.abi.slots) else 0
    views = [np.float32(1.5).item(), _view(0x10000, (n,)), _view(0x20000, (n,)),
             _view(0x30000, (n,))]
    assert words[8] == _expected_params(info, views, word, threads if info.coarsen > 1 else 0)
    assert lines[3] == "launch 0 "


@needs_c
@pytest.mark.parametrize("args,size,code,needle", [
    ("{1.f, 0x10000, {100}, 0x20000, {100}, 0x10000, {100}}", 100, "FL_ERR_ALIAS",
     "parameter 'out': written, and it overlaps the memory of 'x'"),
    ("{1.f, 0x10000, {100}, 0x20000, {100}, 0x30000, {200}}", 100, "FL_ERR_COVERAGE",
     "parameter 'out': the launch covers 100 along axis 0, but it has 200"),
    ("{1.f, 0, {100}, 0x20000, {100}, 0x30000, {100}}", 100, "FL_ERR_NULL",
     "parameter 'x': a null pointer for 400 bytes"),
    ("{1.f, 0x10000, {-1}, 0x20000, {100}, 0x30000, {100}}", 100, "FL_ERR_SHAPE",
     "parameter 'x': extent -1 along axis 0 is negative"),
    ("{1.f, 0x10000, {100}, 0x20000, {100}, 0x30000, {100}}", -5, "FL_ERR_SIZE",
     "the problem size -5 along axis 0 is negative"),
    ("{1.f, 0x10000, {100}, 0x20000, {100}, 0x30000, {100}}", 1 << 50, "FL_ERR_GRID",
     "blocks along grid axis 0, above the device limit")])
def test_a_broken_contract_returns_its_code_without_launching(saxpy_header, tmp_path, args,
                                                              size, code, needle):
    exported, _ = saxpy_header
    lines = _run_c(tmp_path, exported.header, "saxpy", f"""
    fl_saxpy_args a = {args};
    int64_t size[1] = {{{size}LL}};
    report("launch", fl_saxpy_launch(&k, &a, size, NULL), k.message);""")
    assert not any(line.startswith("cuLaunchKernel") for line in lines)
    result = lines[-1]
    assert result.startswith(f"launch {export.STATUS.index(code)} kernel 'saxpy'"), result
    assert needle in result


@needs_c
def test_a_bounds_error_is_reported_with_its_source_line(saxpy_header, tmp_path):
    exported, info = saxpy_header
    site = 1 + [q for q, _ in info.bounds_sites].index("y")
    lines = _run_c(tmp_path, exported.header, "saxpy", f"""
    WORD[0] = {site * 8}; WORD[1] = 123;
    report("check", fl_saxpy_check(&k, NULL), k.message);""")
    check = lines[-1]
    assert check.startswith(f"check {export.STATUS.index('FL_ERR_BOUNDS')} kernel 'saxpy'")
    assert "read out of bounds of y (line 19: out[i] = a * x[i] + y[i]): index 123" in check


@needs_c
def test_requires_and_a_2d_launch(tmp_path):
    types = cli.param_types(shifted, {})
    exported = export.export(shifted, types, ["sm_90"], tmp_path / "out")
    info = shifted._compile(types, "cuda", "sm_90", prove=False).info
    body = """
    fl_shifted_args a = {0x10000, {40, 30}, 0x20000, {%d}, 30, 0x30000, {40, 30}};
    int64_t size[2] = {40, 30};
    report("launch", fl_shifted_launch(&k, &a, size, NULL), k.message);"""
    good = _run_c(tmp_path, exported.header, "shifted", body % 14)
    words = next(line for line in good if line.startswith("cuLaunchKernel")).split()
    # x: 30 cols in blocks of 16; y: 40 rows in blocks of 8, each thread coarsened rows
    assert [int(v) for v in words[1:7]] == [2, -(-5 // info.coarsen), 1, 16, 8, 1]
    views = [_view(0x10000, (40, 30)), _view(0x20000, (14,)), 30, _view(0x30000, (40, 30))]
    word = 0x7000 if info.bounds_sites else 0
    assert words[8] == _expected_params(info, views, word, 5 * 8 if info.coarsen > 1 else 0)
    bad = _run_c(tmp_path, exported.header, "shifted", body % 13)[-1]
    assert bad.startswith(f"launch {export.STATUS.index('FL_ERR_REQUIRES')} kernel 'shifted'")
    assert "requirement `len(bias) >= cols // 2 - 1`: 13 against 14" in bad


@needs_c
def test_requirement_arithmetic_past_64_bits_refuses_and_bools_pack_as_python(tmp_path):
    types = cli.param_types(gated, {})
    exported = export.export(gated, types, ["sm_90"], tmp_path / "out")
    info = gated._compile(types, "cuda", "sm_90", prove=False).info
    lines = _run_c(tmp_path, exported.header, "gated", """
    fl_gated_args a = {0x10000, {64}, 2, 8, 8, 0x30000, {64}};
    int64_t size[1] = {64};
    report("good", fl_gated_launch(&k, &a, size, NULL), k.message);
    a.n = 1LL << 32; a.m = 1LL << 32;     /* n * m wraps to 0 in 64 bits: Python refuses */
    report("overflow", fl_gated_launch(&k, &a, size, NULL), k.message);
    a.n = 8; a.m = 8; a.x_shape[0] = 1LL << 62;   /* 2^64 bytes */
    report("bytes", fl_gated_launch(&k, &a, size, NULL), k.message);""")
    words = next(line for line in lines if line.startswith("cuLaunchKernel")).split()
    views = [_view(0x10000, (64,)), True, 8, 8, _view(0x30000, (64,))]
    word = 0x7000 if info.bounds_sites else 0
    threads = 128 if info.coarsen > 1 else 0
    assert words[8] == _expected_params(info, views, word, threads)   # `on` 2 packs as 1
    overflow = next(line for line in lines if line.startswith("overflow"))
    assert overflow.startswith(f"overflow {export.STATUS.index('FL_ERR_REQUIRES')} ")
    assert "64-bit arithmetic cannot hold it" in overflow
    bytes_line = next(line for line in lines if line.startswith("bytes"))
    assert "more bytes than 64 bits count" in bytes_line
    assert sum(line.startswith("cuLaunchKernel") for line in lines) == 1


def test_what_a_launch_would_refuse_is_refused_at_export(tmp_path):
    with pytest.raises(fl.errors.ContractError, match="index_1d"):
        export.export(one_d_in_two, cli.param_types(one_d_in_two, {}), ["sm_90"], tmp_path)
    with pytest.raises(export.ExportError, match="'int' is a C or C\\+\\+ keyword"):
        export.export(keyword, cli.param_types(keyword, {}), ["sm_90"], tmp_path)


@needs_c
def test_every_example_kernel_exports_to_a_warning_free_header(tmp_path):
    built = 0
    for script in sorted((ROOT / "examples").glob("[!_]*.py")):
        module = importlib.import_module(f"examples.{script.stem}")
        for kernel in vars(module).values():
            if type(kernel).__name__ != "Kernel":
                continue
            try:
                types = cli.param_types(kernel, {})
                exported = export.export(kernel, types, ["sm_90"], tmp_path / kernel.name)
            except (cli.UsageError, export.ExportError):
                continue   # a generic kernel, or one that export refuses by name
            source = tmp_path / f"{kernel.name}.c"
            source.write_text(f'#include "{exported.header.name}"\nint main(void) {{ return 0; }}\n')
            build = subprocess.run([CC, "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic",
                                    "-fsyntax-only", f"-I{exported.header.parent}", "-isystem",
                                    str(INCLUDE), str(source)], capture_output=True, text=True)
            assert build.returncode == 0, f"{kernel.name}: {build.stderr}"
            if CXX is not None:   # the header is for C++ callers too
                build = subprocess.run([CXX, "-std=c++17", "-x", "c++", "-Wall", "-Wextra",
                                        "-Werror", "-fsyntax-only", f"-I{exported.header.parent}",
                                        "-isystem", str(INCLUDE), str(source)],
                                       capture_output=True, text=True)
                assert build.returncode == 0, f"{kernel.name} (C++): {build.stderr}"
            built += 1
    assert built >= 8


def test_tile_kernels_and_dynamic_shared_memory_are_refused():
    add = importlib.import_module("examples.tile_vector_add")
    kernel = next(v for v in vars(add).values() if type(v).__name__ == "TileKernel")
    with pytest.raises(export.ExportError, match="only SIMT kernels"):
        export.export(kernel, (), ["sm_90"], "/nonexistent")


def test_the_command_line(tmp_path, capsys):
    code = cli.main(["export", str(ROOT / "examples/saxpy.py") + ":saxpy", "--arch", "sm_90",
                     "-o", str(tmp_path)])
    assert code == 0, capsys.readouterr().err
    assert (tmp_path / "saxpy.h").is_file() and (tmp_path / "saxpy.sm_90.cubin").is_file()
    assert "saxpy.h" in capsys.readouterr().out
    assert cli.main(["export", str(ROOT / "examples/saxpy.py") + ":saxpy", "-o",
                     str(tmp_path)]) == 0   # sm_90 by default


@pytest.mark.gpu
@needs_c
def test_the_exported_saxpy_runs_from_c(saxpy_header, tmp_path):
    """Built against the real driver (-lcuda): saxpy from C on the GPU, against NumPy."""
    exported, _ = saxpy_header
    source = tmp_path / "run.c"
    source.write_text(f'#include "{exported.header.name}"\n' + r"""
int main(void) {
    enum { N = 100003 };
    static float x[N], y[N], out[N];
    CUdevice dev; CUcontext ctx; CUdeviceptr dx, dy, dout;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
        cuCtxSetCurrent(ctx)) return 2;
    for (int i = 0; i < N; i++) { x[i] = (float)(i % 97) * 0.5f; y[i] = (float)(i % 13); }
    cuMemAlloc(&dx, sizeof x); cuMemAlloc(&dy, sizeof y); cuMemAlloc(&dout, sizeof out);
    cuMemcpyHtoD(dx, x, sizeof x); cuMemcpyHtoD(dy, y, sizeof y);
    fl_saxpy_kernel k;
    int code = fl_saxpy_load(&k);
    if (code) { printf("load %d %s\n", code, k.message); return 1; }
    fl_saxpy_args a = {2.5f, dx, {N}, dy, {N}, dout, {N}};
    int64_t size[1] = {N};
    code = fl_saxpy_launch(&k, &a, size, NULL);
    if (!code) code = fl_saxpy_check(&k, NULL);
    if (code) { printf("run %d %s\n", code, k.message); return 1; }
    cuMemcpyDtoH(out, dout, sizeof out);
    for (int i = 0; i < N; i++) printf("%.9g\n", out[i]);
    fl_saxpy_unload(&k);
    return 0;
}
""")
    exe = tmp_path / "run"
    subprocess.run([CC, "-std=c99", f"-I{exported.header.parent}", f"-I{INCLUDE}", str(source),
                    "-o", str(exe), "-lcuda"], check=True)
    got = np.array(subprocess.run([str(exe)], capture_output=True, text=True, check=True
                                  ).stdout.split(), np.float32)
    i = np.arange(100003)
    x, y = (i % 97).astype(np.float32) * np.float32(0.5), (i % 13).astype(np.float32)
    np.testing.assert_allclose(got, np.float32(2.5) * x + y, rtol=2 ** -22)  # one rounding, fused or not


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
