"""Grid-stride and block-stride loops, and the thread's index spelled out with block_index,
block_dim and thread_in_block (``analysis/strided.py``).

Accepted kernels run on the cpu backend (and on the GPU with ``-m gpu``), outputs poisoned with
NaN first and compared with NumPy; refused ones are checked for their reason, the line and the
expression under the caret, and their help; the host still refuses a launch that leaves output
elements unwritten.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import fearless as fl
from fearless.errors import ContractError, SafetyError
from fearless.ir import types as T
from tests.simt import strided_kernels as k

BACKENDS = [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)]
READ1, OUT1 = T.Array(fl.f32, 1, T.Access.READ, True), T.Array(fl.f32, 1, T.Access.DISJOINT, True)
READ2, OUT2 = T.Array(fl.f32, 2, T.Access.READ, True), T.Array(fl.f32, 2, T.Access.DISJOINT, True)
INTERNAL = re.compile(r"fearless\.(ir|frontend|backends|passes|runtime|analysis)|Operation|"
                      r"mem\.(load|store)|arith\.|local\.|simt\.|scf\.")


def _random(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("n, threads", [(5000, 300), (100, 1024), (1, 1), (4099, 4096)])
def test_a_grid_stride_loop_covers_the_output_with_any_grid(backend, n, threads):
    x = _random(n, n)
    out = fl.full(n, np.nan, fl.f32)
    k.grid_stride[k.grid_stride.prepare(threads)](fl.asarray(x), out)
    np.testing.assert_array_equal(out.numpy(), x * np.float32(2) + np.float32(1))


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_a_grid_stride_loop_spelled_out_as_in_cuda(backend):
    x = _random(3000, 1)
    out = fl.full(3000, np.nan, fl.f32)
    k.grid_stride_spelled_out[k.grid_stride_spelled_out.prepare(2 * k.BLOCK)](fl.asarray(x), out)
    np.testing.assert_array_equal(out.numpy(), x - np.float32(3))


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_a_grid_stride_loop_reads_and_writes_the_counters_element(backend):
    x, before = _random(2000, 2), _random(2000, 3)
    out = fl.asarray(before.copy())
    k.grid_stride_accumulate[k.grid_stride_accumulate.prepare(256)](fl.asarray(x), out)
    np.testing.assert_array_equal(out.numpy(), before + x)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("launch", [(10, 40), (1, 1), (64, 128)])
def test_a_2d_grid_stride_loop_covers_rows_and_columns(backend, launch):
    a = _random((37, 101), 4)
    out = fl.full((37, 101), np.nan, fl.f32)
    k.grid_stride_2d[k.grid_stride_2d.prepare(launch)](fl.asarray(a), out)
    np.testing.assert_array_equal(out.numpy(), a * a)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("shape", [(37, 101), (8, 32), (1, 1)])
def test_the_2d_thread_index_spelled_out_is_the_own_element(backend, shape):
    a = _random(shape, 5)
    out = fl.full(shape, np.nan, fl.f32)
    k.own_index_spelled_out[k.own_index_spelled_out.prepare(shape)](fl.asarray(a), out)
    np.testing.assert_array_equal(out.numpy(), a + np.float32(1))


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_the_1d_thread_index_spelled_out_under_an_exact_block(backend):
    x = _random(1000, 6)
    out = fl.full(1000, np.nan, fl.f32)
    k.own_index_spelled_out_1d[k.own_index_spelled_out_1d.prepare(1000)](fl.asarray(x), out)
    np.testing.assert_array_equal(out.numpy(), x * np.float32(5))


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("kernel, scale", [("block_per_row", 3), ("block_per_row_slot", None)])
@pytest.mark.parametrize("shape", [(7, 300), (3, 5), (2, 128)])
def test_one_block_per_row_with_a_block_stride_loop(backend, kernel, scale, shape):
    kern = getattr(k, kernel)
    x = _random(shape, 7)
    out = fl.full(shape, np.nan, fl.f32)
    kern[kern.prepare(shape[0] * k.BLOCK)](fl.asarray(x), out)  # one block per row
    want = x * np.float32(scale) if scale else x - np.float32(1)
    np.testing.assert_array_equal(out.numpy(), want)


def test_stride_loops_cover_whole_axes_and_step_forward():
    info = k.grid_stride.compile_for((READ1, OUT1), "cpu").info
    assert info.covered() == {"out": ((None, float("inf")),)}
    info = k.block_per_row.compile_for((READ2, OUT2), "cpu").info
    assert info.covered() == {"out": ((0, 1), (None, float("inf")))}
    assert "step_sign = 1" in k.grid_stride.inspect("passes", (READ1, OUT1))
    assert k.own_index_spelled_out.compile_for((READ2, OUT2), "cpu").info.covered() == {}


def test_grid_stride_kernels_run_one_logical_thread_per_hardware_thread():
    # the proof reads index_1d() as blockIdx.x * blockDim.x + threadIdx.x: no coarsening
    text = k.grid_stride.inspect("llvm", (READ1, OUT1))
    assert "logical" not in text and "nctaid" in text


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_the_thread_index_spelled_out_bounds_unguarded_reads_by_the_launch(backend):
    text = k.unguarded_spelled_out.inspect("passes", (READ2, OUT2))
    assert "('a', 0, '<threads>', 1)" in text and "('a', 1, '<threads>', 0)" in text
    a = _random((16, 64), 8)  # exactly the threads of the launch: the reads go unchecked
    out = fl.full((16, 64), np.nan, fl.f32)
    k.unguarded_spelled_out[k.unguarded_spelled_out.prepare((16, 64))](fl.asarray(a), out)
    np.testing.assert_array_equal(out.numpy(), a * np.float32(0.5))


def test_a_row_per_block_launch_with_too_few_blocks_is_refused():
    out = fl.zeros((7, 300), fl.f32)
    with pytest.raises(ContractError, match=r"the launch writes \(2, all\) elements of 'out' "
                                            r"but it has shape \(7, 300\)"):
        k.block_per_row[k.block_per_row.prepare(2 * k.BLOCK)](fl.zeros((7, 300)), out)


def test_the_2d_thread_index_spelled_out_still_needs_a_launch_covering_the_output():
    out = fl.zeros((37, 101), fl.f32)
    with pytest.raises(ContractError, match=r"the launch covers \(8, 101\) but 'out' has shape "
                                            r"\(37, 101\)"):
        k.own_index_spelled_out[k.own_index_spelled_out.prepare((8, 101))](
            fl.zeros((37, 101)), out)


REFUSED = {
    # kernel: (reason, expression under the caret, where it is: "range" or "index", help)
    "constant_step": ("'out' is written on line {store} at the counter of this loop, which starts "
                      "at the thread's own index but does not step by the launch's thread count "
                      "(fl.thread.grid_size()), so two threads may reach one element",
                      "1024", "range", "range(fl.thread.index_1d(), n, fl.thread.grid_size())"),
    "half_step": ("does not step by the launch's thread count (fl.thread.grid_size())",
                  "fl.thread.grid_size() // 2", "range",
                  "range(fl.thread.index_1d(), n, fl.thread.grid_size())"),
    "zero_start": ("'out' is written on line {store} at the counter of this loop, which steps by "
                   "the launch's thread count (fl.thread.grid_size()) but does not start at the "
                   "thread's own index, so two threads may reach one element",
                   "0", "range", "range(fl.thread.index_1d(), n, fl.thread.grid_size())"),
    "shifted_start": ("does not start at the thread's own index", "fl.thread.index_1d() + 1",
                      "range", "range(fl.thread.index_1d(), n, fl.thread.grid_size())"),
    "also_writes_next": ("in the grid-stride loop on line {loop}, 'out' may be accessed only at "
                         "the loop's counter: each thread owns the elements that its counter "
                         "visits, and this index may be another thread's element",
                         "i + 1", "index",
                         "index 'out' only with the loop's counter itself, as out[i]"),
    "also_writes_elsewhere": ("in the grid-stride loop on line {loop}, 'out' may be accessed "
                              "only at the loop's counter", "j", "index",
                              "index 'out' only with the loop's counter itself"),
    "every_block_same_columns": ("in the block-stride loop on line {loop}, the blocks of the "
                                 "launch all reach the same elements of 'out'", "c", "index",
                                 "give each block its own row, "
                                 "out[fl.thread.block_index(), c]"),
    "row_per_block_any_launch": ("threads that differ only along y (thread_in_block(1), "
                                 "block_index(1)) reach the same elements of 'out', and the "
                                 "launch is not known to be 1-d", "c", "index",
                                 "fl.Contract(dims=1, block=256)"),
    "block_stride_half_block": ("which starts at the thread's index in its block but does not "
                                "step by the block's thread count (fl.thread.block_dim())", "64",
                                "range",
                                "range(fl.thread.thread_in_block(0), n, fl.thread.block_dim())"),
    "block_stride_fixed_row": ("in the block-stride loop on line {loop}, each index of 'out' "
                               "must be the loop's counter or a coordinate of the thread or its "
                               "block, and this one is neither", "0", "index",
                               "out[fl.thread.block_index(), c]"),
}
TWO_D = {"row_per_block_any_launch", "block_stride_half_block", "block_stride_fixed_row"}


def _lines(name: str, caret: str, where: str) -> dict:
    """Line numbers in strided_kernels.py of kernel ``name``'s loop, its first store of 'out' and
    the line of the caret: ``caret`` as an argument of ``range`` or an index of ``out``."""
    source = open(k.__file__).read().splitlines()
    start = next(n for n, line in enumerate(source) if line.startswith(f"def {name}("))
    body = list(enumerate(source[start + 1:], start + 2))
    find = lambda pattern: next(n for n, line in body if re.search(pattern, line))  # noqa: E731
    caret = re.escape(caret)
    return {"loop": find(r"^\s*for "), "store": find(r"out\[.*\] = "),
            "caret": find(rf"range\((.*, )?{caret}[,)]" if where == "range" else
                          rf"out\[([^]]*, )?{caret}[],]")}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_stride_loops_point_at_the_line(name):
    reason, caret, where, help = REFUSED[name]
    kern = getattr(k, name)
    shape = (4, 8) if name in TWO_D else 64
    with pytest.raises(SafetyError) as info:
        kern[kern.prepare(4 * k.BLOCK)](fl.zeros(shape), fl.zeros(shape))
    err = info.value
    lines = _lines(name, caret, where)
    assert (err.kernel, err.param) == (name, "out")
    assert reason.format(**lines) in err.reason
    assert err.span.line == lines["caret"]
    assert err.span.text[err.span.col:err.span.end_col] == caret
    assert help in err.help
    assert not INTERNAL.search(str(err))
