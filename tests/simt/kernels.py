"""Kernels using shared memory, barriers, atomics and block coordinates, for tests/simt.

Line numbers matter for the golden texts in test_shared.py; append new kernels at the end.
"""
import fearless as fl
from fearless import f32, i32, u32

B = 128


@fl.kernel
def block_sum(x: fl.Slice[f32], out: fl.DisjointSlice[f32], sums: fl.AtomicSlice[f32]):
    i = fl.thread.index_1d()
    t = fl.thread.index_in_block()
    s = fl.shared.array(B, f32)
    s[t] = x[i] if i < len(x) else 0.0
    fl.sync_threads()
    if t == 0:
        acc = 0.0
        for k in range(B):
            acc += s[k]
        sums.add(fl.thread.block_index(), acc)
    out[i] = s[t]


@fl.kernel
def tree_sum(x: fl.Slice[f32], partial: fl.UnsafeSlice[f32]):
    i = fl.thread.index_1d()
    t = fl.thread.index_in_block()
    s = fl.shared.array(B, f32)
    s[t] = x[i] if i < len(x) else 0.0
    fl.sync_threads()
    stride = B // 2
    while stride > 0:
        v = s[t + stride] if t < stride else 0.0
        fl.sync_threads()
        if t < stride:
            with fl.unsafe():
                s[t] = s[t] + v
        fl.sync_threads()
        stride //= 2
    if t == 0:
        with fl.unsafe():
            partial[fl.thread.block_index()] = s[0]


@fl.kernel
def histogram(data: fl.Slice[u32], counts: fl.AtomicSlice[u32]):
    i = fl.thread.index_1d()
    if i < len(data):
        counts.add(data[i], 1)


@fl.kernel
def shared_histogram(data: fl.Slice[u32], counts: fl.AtomicSlice[u32]):
    i = fl.thread.index_1d()
    t = fl.thread.index_in_block()
    bins = fl.shared.array(B, u32)
    bins[t] = 0
    fl.sync_threads()
    if i < len(data):
        bins.add(data[i] % B, 1)
    fl.sync_threads()
    n = bins.add(t, 0)
    if n > 0:
        counts.add(t, n)


@fl.kernel
def reverse_block(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    t = fl.thread.index_in_block()
    buf = fl.shared.dynamic(f32)
    buf[t] = x[i]
    fl.sync_threads()
    out[i] = buf[len(buf) - 1 - t]


@fl.kernel
def transpose(a: fl.Array[f32, 2], out: fl.DisjointArray[f32, 2]):
    ty, tx = fl.thread.index_in_block_2d()
    tile = fl.shared.array((32, 33), f32)
    r0 = fl.thread.block_index(0) * 32  # the input tile mirrors the output block
    c0 = fl.thread.block_index(1) * 32
    rows, cols = a.shape
    if r0 + ty < rows and c0 + tx < cols:
        tile[ty, tx] = a[r0 + ty, c0 + tx]
    fl.sync_threads()
    r, c = fl.thread.index_2d()
    if r < out.shape[0] and c < out.shape[1]:
        out[r, c] = tile[tx, ty]


@fl.kernel
def atomics_all(old: fl.DisjointSlice[i32], a: fl.AtomicSlice[i32]):
    i = fl.thread.index_1d()
    k = i % 4
    if k == 0:
        old[i] = a.max(0, i)
    elif k == 1:
        old[i] = a.min(1, i, scope="block")
    elif k == 2:
        old[i] = a.exchange(2, i, order="acq_rel")
    else:
        old[i] = a.compare_exchange(3, 0, i, scope="system", order="seq_cst")


# refused ---------------------------------------------------------------------------------------

@fl.kernel
def neighbour_write(out: fl.DisjointSlice[f32]):
    t = fl.thread.index_in_block()
    s = fl.shared.array(B, f32)
    s[t + 1] = 1.0
    fl.sync_threads()
    out[fl.thread.index_1d()] = s[t]


@fl.kernel
def no_barrier(out: fl.DisjointSlice[f32]):
    t = fl.thread.index_in_block()
    s = fl.shared.array(B, f32)
    s[t] = 1.0
    out[fl.thread.index_1d()] = s[(t + 1) % B]


@fl.kernel
def divergent_barrier(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    t = fl.thread.index_in_block()
    s = fl.shared.array(B, f32)
    if i < len(x):
        s[t] = x[i]
        fl.sync_threads()
    out[i] = s[t]


@fl.kernel
def early_return(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    t = fl.thread.index_in_block()
    s = fl.shared.array(B, f32)
    if i >= len(x):
        return
    s[t] = x[i]
    fl.sync_threads()
    out[i] = s[B - 1 - t]


@fl.kernel
def write_after_read(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    t = fl.thread.index_in_block()
    s = fl.shared.array(B, f32)
    acc = 0.0
    for k in range(4):
        s[t] = x[i] + k
        fl.sync_threads()
        acc += s[(t + 1) % B]
    out[i] = acc


@fl.kernel
def shared_plus_equals(out: fl.DisjointSlice[f32]):
    s = fl.shared.array(1, f32)
    s[0] += 1.0
    out[fl.thread.index_1d()] = 0.0


@fl.kernel
def global_plus_equals(x: fl.Slice[i32], counts: fl.DisjointSlice[i32]):
    i = fl.thread.index_1d()
    counts[x[i]] += 1


@fl.kernel
def unsafe_outside(out: fl.UnsafeSlice[f32]):
    out[fl.thread.index_1d() + 0] = 1.0


@fl.kernel
def atomic_read(a: fl.AtomicSlice[i32], out: fl.DisjointSlice[i32]):
    i = fl.thread.index_1d()
    out[i] = a[i]


# races the cpu detector must find (all inside fl.unsafe) -----------------------------------------

@fl.kernel
def race_shared_counter(out: fl.DisjointSlice[f32]):
    s = fl.shared.array(1, f32)
    t = fl.thread.index_in_block()
    if t == 0:
        with fl.unsafe():
            s[0] = 0.0
    fl.sync_threads()
    with fl.unsafe():
        s[0] += 1.0
    fl.sync_threads()
    out[fl.thread.index_1d()] = s[0]


@fl.kernel
def race_skipped_barrier(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    t = fl.thread.index_in_block()
    s = fl.shared.array(B, f32)
    if i >= len(x):
        return
    s[t] = x[i]
    with fl.unsafe():
        fl.sync_threads()
    out[i] = s[B - 1 - t]


@fl.kernel
def race_scatter(idx: fl.Slice[i32], x: fl.Slice[f32], out: fl.UnsafeSlice[f32]):
    i = fl.thread.index_1d()
    if i < len(idx):
        with fl.unsafe():
            out[idx[i]] = x[i]


@fl.kernel
def race_unsafe_neighbour_read(out: fl.DisjointSlice[f32]):
    t = fl.thread.index_in_block()
    s = fl.shared.array(B, f32)
    s[t] = 1.0
    with fl.unsafe():
        v = s[(t + 1) % B]
    out[fl.thread.index_1d()] = v


@fl.kernel
def dynamic_first(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    t = fl.thread.index_in_block()
    buf = fl.shared.dynamic(f32)
    buf[t] = x[i]
    fl.sync_threads()
    out[i] = buf[0]


# the tree reduction in one statement: within a barrier interval, the threads below `stride`
# write slots [0, stride) and read slots [stride, 2 * stride) --------------------------------------

@fl.kernel
def tree_reduce(x: fl.Slice[f32], sums: fl.AtomicSlice[f32]):
    i = fl.thread.index_1d()
    t = fl.thread.index_in_block()
    s = fl.shared.array(B, f32)
    s[t] = x[i] if i < len(x) else 0.0
    fl.sync_threads()
    stride = B // 2
    while stride > 0:
        if t < stride:
            s[t] = s[t] + s[t + stride]
        fl.sync_threads()
        stride //= 2
    if t == 0:
        sums.add(fl.thread.block_index(), s[0])


@fl.kernel
def tree_reduce_plus_equals(x: fl.Slice[f32], sums: fl.AtomicSlice[f32]):
    i = fl.thread.index_1d()
    t = fl.thread.index_in_block()
    s = fl.shared.array(B, f32)
    s[t] = x[i] if i < len(x) else 0.0
    fl.sync_threads()
    stride = B // 2
    while stride > 0:
        ok = t < stride
        if ok:
            s[t] += s[t + stride]
        fl.sync_threads()
        stride //= 2
    if t == 0:
        sums.add(fl.thread.block_index(), s[0])


@fl.kernel
def tree_off_by_one(x: fl.Slice[f32], sums: fl.AtomicSlice[f32]):
    t = fl.thread.index_in_block()
    s = fl.shared.array(B, f32)
    s[t] = 1.0
    fl.sync_threads()
    stride = B // 2
    while stride > 0:
        if t < stride:
            s[t] = s[t] + s[t + stride - 1]
        fl.sync_threads()
        stride //= 2
    sums.add(0, s[t])


@fl.kernel
def neighbour_sum(x: fl.Slice[f32], sums: fl.AtomicSlice[f32]):
    t = fl.thread.index_in_block()
    s = fl.shared.array(B + 1, f32)
    s[t] = 1.0
    fl.sync_threads()
    s[t] = s[t] + s[t + 1]
    fl.sync_threads()
    sums.add(0, s[t])


@fl.kernel
def tree_no_loop_barrier(x: fl.Slice[f32], sums: fl.AtomicSlice[f32]):
    t = fl.thread.index_in_block()
    s = fl.shared.array(B, f32)
    s[t] = 1.0
    fl.sync_threads()
    stride = B // 2
    while stride > 0:
        if t < stride:
            s[t] += s[t + stride]
        stride //= 2
    fl.sync_threads()
    sums.add(0, s[t])


@fl.kernel
def tree_varying_stride(x: fl.Slice[f32], sums: fl.AtomicSlice[f32]):
    t = fl.thread.index_in_block()
    s = fl.shared.array(2 * B, f32)
    s[t] = 1.0
    fl.sync_threads()
    stride = 1
    if t % 2 == 0:
        stride = B // 2
    if t < stride:
        s[t] = s[t] + s[t + stride]
    fl.sync_threads()
    sums.add(0, s[t])


@fl.kernel
def race_tree_off_by_one(x: fl.Slice[f32], sums: fl.AtomicSlice[f32]):
    t = fl.thread.index_in_block()
    s = fl.shared.array(B, f32)
    s[t] = 1.0
    fl.sync_threads()
    if t < 64:
        with fl.unsafe():
            s[t] = s[t] + s[t + 63]
    fl.sync_threads()
    sums.add(0, s[t])



@fl.kernel
def tree_stride_changed_between(x: fl.Slice[f32], sums: fl.AtomicSlice[f32]):
    t = fl.thread.index_in_block()
    s = fl.shared.array(B, f32)
    s[t] = 1.0
    fl.sync_threads()
    stride = B // 2
    while stride > 1:
        v = s[t + stride]
        ok = t < stride
        stride //= 2  # the next step reads t + stride, below the slots this step writes
        if ok:
            s[t] = s[t] + v
    fl.sync_threads()
    sums.add(0, s[t])
