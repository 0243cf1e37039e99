"""The inbounds pass: reads proven in bounds by their guards lose their checks; the host checks
the preconditions at launch and runs the fully checked variant when one fails, so a bad read is
still a KernelBoundsError with the same text. IR level, CPU semantics, and PTX text."""
from __future__ import annotations

import re

import numpy as np
import pytest

import fearless as fl
from fearless import f32
from fearless.errors import KernelBoundsError
from fearless.ir import types as T

V = T.Array(f32, 1, T.Access.READ, True)
O = T.Array(f32, 1, T.Access.DISJOINT, True)
M = T.Array(f32, 2, T.Access.READ, True)
MO = T.Array(f32, 2, T.Access.DISJOINT, True)


@fl.kernel
def add(x: fl.Slice[f32], y: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = x[i] + y[i]


@fl.kernel
def guarded_by_x(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    if i < len(x) and i < len(out):
        out[i] = x[i]


@fl.kernel
def shifted(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = x[i + 1]           # i + 1 < len(out) is not known: stays checked


@fl.kernel
def strided(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    n = len(x)
    step = fl.thread.grid_dim()
    if i + 2 * step < n:
        out[i] = x[i] + x[i + step] + x[i + 2 * step]   # f - e >= 0 with step >= 0
    else:
        out[i] = 0.0


@fl.kernel
def clamped(img: fl.Array[f32, 2], out: fl.DisjointArray[f32, 2]):
    r, c = fl.thread.index_2d()
    rows, cols = img.shape
    if r < out.shape[0] and c < out.shape[1]:
        out[r, c] = img[min(max(r - 1, 0), rows - 1), min(c + 0, cols - 1)]


@fl.kernel(contract=fl.Contract(dims=1, block=128))
def per_warp(x: fl.Slice[fl.u8], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    s = fl.shared.array(4 * 256 + 32, f32)        # 4 warps of 256 slots, then one per lane
    s.exchange(fl.warp.index() * 256 + x[0], 1.0)  # warp <= 3 under block=128: <= 1023
    s.exchange(4 * 256 + fl.warp.lane(), 1.0)      # lane <= 31: <= 1055
    s.exchange(fl.warp.index() * 300 + x[0], 1.0)  # <= 1155: may be out of bounds
    out[i] = 0.0


@fl.kernel(contract=fl.Contract(dims=2, block=(16, 16)))
def slot_in_2d_block(x: fl.Slice[f32], out: fl.DisjointArray[f32, 2]):
    r, c = fl.thread.index_2d()
    s = fl.shared.array(16, f32)
    v = s[fl.thread.index_in_block()]  # the linear slot reaches 255 in a 16 x 16 block
    if r < out.shape[0] and c < out.shape[1]:
        out[r, c] = v


def passes(kernel, types):
    return kernel.inspect("passes", types)


def loads(text):
    return re.findall(r"mem\.load %(\w+).*?\{(.*?)\}", text)


def test_a_guard_on_the_output_proves_reads_under_a_host_precondition():
    text = passes(add, (V, V, O))
    assert loads(text) == [("x", "checked = False, proved = True, site = 1"),
                           ("y", "checked = False, proved = True, site = 2")]
    assert "bounds_preconditions=(('x', 0, 'out', 0), ('y', 0, 'out', 0))" in text


def test_a_guard_on_the_array_read_needs_no_precondition():
    text = passes(guarded_by_x, (V, O))
    assert loads(text) == [("x", "checked = False, proved = True, site = 1")]
    assert "bounds_preconditions=()" in text


def test_unproven_reads_keep_their_checks_and_unchecked_kernels_are_untouched():
    assert loads(passes(shifted, (V, O))) == [("x", "checked = True, site = 1")]
    assert "proved" not in passes(fl.unchecked(add), (V, V, O))


def test_linear_forms_and_clamps():
    assert all("proved" in attrs for _, attrs in loads(passes(strided, (V, O))))
    text = passes(clamped, (M, MO))
    assert loads(text) == [("img", "checked = False, proved = True, site = 1")]
    # min(max(r - 1, 0), rows - 1) >= 0 only when rows >= 1; c + 0 < cols by the clamp alone
    assert "bounds_preconditions=(('img', 0, None, 1), ('img', 1, None, 1))" in text


def test_examples_reads_are_proven():
    from examples.histogram import histogram
    from examples.transpose import transpose
    t = passes(transpose, (M, MO))
    # a[c0 + ty + 4k, r0 + tx] in the whole-tile and the edge branches, tile[tx, ty + 4k] in
    # both of the output's: 4 x 8 reads, and every store proved too
    assert [a for _, a in loads(t)] == [f"checked = False, proved = True, site = {k}"
                                        for k in range(1, 33)]
    assert t.count("mem.store") == 32 and t.count("proved = True") == 64
    h = passes(histogram, (T.Array(fl.u8, 1, T.Access.READ, True),
                           T.Array(fl.u32, 1, T.Access.ATOMIC, True)))
    counts = [a for a in re.findall(r"mem\.atomic .*?\{(.*?)\}", h) if "'add'" in a
              and "'block'" in a]
    # local[warp * 256 + pixel]: the warp index is below 16 under the contract, a u8 below 256
    assert len(counts) == 17 and all("checked = False" in a for a in counts)


def test_lane_and_warp_index_are_bounded_by_the_contract_block():
    def checked(kernel):
        text = passes(kernel, (T.Array(fl.u8, 1, T.Access.READ, True), O))
        return ["checked = True" in a for a in re.findall(r"mem\.atomic .*?\{(.*?)\}", text)]
    assert checked(per_warp) == [False, False, True]
    assert checked(fl.kernel(per_warp.fn)) == [True, False, True]  # no block: only the lane


@pytest.mark.parametrize("backend", ["cpu"], indirect=True)
def test_cpu_results_and_the_fallback_when_a_precondition_fails(backend):
    x, y = np.arange(10, dtype=np.float32), np.ones(10, np.float32)
    out = fl.full(10, np.nan, f32)
    add[add.prepare(10)](fl.asarray(x), fl.asarray(y), out)
    np.testing.assert_array_equal(out.numpy(), x + 1)
    short = fl.asarray(x[:7])  # len(x) < len(out): the checked variant runs and reports
    add[add.prepare(10)](short, fl.asarray(y), fl.full(10, np.nan, f32))
    with pytest.raises(KernelBoundsError, match="parameter 'x': read out of bounds: index 7, "
                                                "but the length is 7"):
        fl.synchronize()
    add[add.prepare(10)](fl.asarray(x), fl.asarray(y), out)  # sizes fit again: fast variant
    fl.synchronize()


def test_ptx_of_a_proven_kernel_matches_the_unchecked_one():
    types = (V, V, O)
    proven, unchecked = add.inspect("ptx", types), fl.unchecked(add).inspect("ptx", types)
    assert "atom" not in proven and "selp" not in proven  # no error word, no clamped index
    params = lambda text: len(re.findall(r"_param_\d+,?\n", text))
    assert params(proven) == params(unchecked)
    body = lambda text: [ln.split()[0] for ln in text.splitlines() if ln.startswith("\t")
                         and not ln.startswith("\t.") and not ln.startswith("\t//")]
    assert len(body(proven)) == len(body(unchecked))


def test_the_linear_slot_of_a_2d_block_is_bounded_by_all_its_threads():
    text = passes(slot_in_2d_block, (T.Array(f32, 1, T.Access.READ, True), MO))
    assert [a for _, a in loads(text)] == ["checked = True, site = 1"]
