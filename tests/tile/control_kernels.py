"""Tile kernels of the control-flow tests: scalars from reductions, while, break, continue and
return (a module of its own: kernels need their source file). Each has a NumPy model in
test_control_flow.py or test_scalar_reductions.py."""
from __future__ import annotations

import fearless as fl
from fearless import f32
from fearless import tile as ft

# scalars from reductions --------------------------------------------------------------------


@ft.kernel
def every_reduction(out: ft.Out[f32], x: ft.In, bm: ft.Const[int] = 16, bn: ft.Const[int] = 32):
    """Block i reduces the (bm, bn) tile i of x down the rows: out[i, :] holds its sum, max,
    min and flat argmax, the sum and argmax of its first row (1-d), its keepdims sum and
    whether any element is > 0."""
    i = out.tile_index[0]
    t = ft.load(x, (i, 0), (bm, bn))
    line = ft.reshape(ft.load(x, (i * bm, 0), (1, bn)), (bn,))
    slot = ft.reshape(ft.arange(8), (1, 8))
    got = ft.where(slot == 0, ft.full((1, 8), ft.sum(t), f32), 0.0)
    got = ft.where(slot == 1, ft.full((1, 8), ft.max(t), f32), got)
    got = ft.where(slot == 2, ft.full((1, 8), t.min(), f32), got)
    got = ft.where(slot == 3, ft.full((1, 8), ft.argmax(t), f32), got)
    got = ft.where(slot == 4, ft.full((1, 8), ft.sum(line, 0), f32), got)
    got = ft.where(slot == 5, ft.full((1, 8), line.argmax(0), f32), got)
    got = ft.where(slot == 6, ft.sum(t, keepdims=True).astype(f32), got)
    got = ft.where(slot == 7, ft.full((1, 8), ft.max(t > 0), f32), got)
    out.store(got)


@ft.kernel
def softmax_tile(out: ft.Out[f32], x: ft.In[f32]):
    """The softmax of each whole tile (a scalar max and sum, no keepdims)."""
    t = ft.load_like(x, out)
    e = ft.exp(t - ft.max(t))
    out.store(e / ft.sum(e))


@ft.kernel
def sign_of_sum(out: ft.Out[f32], x: ft.In[f32]):
    """An if on tile data: tiles whose sum is positive are kept, the others negated."""
    t = ft.load_like(x, out)
    total = ft.sum(t)
    if total > 0:
        out.store(t)
    else:
        out.store(-t)


# loops ------------------------------------------------------------------------------------------


@ft.kernel
def halve_until_small(out: ft.Out[f32], x: ft.In[f32], limit: f32):
    """A while on a scalar of the tile: halve it until no element exceeds limit in size."""
    t = ft.load_like(x, out)
    k = 0
    while k < 64 and ft.max(abs(t)) > limit:
        t = t * 0.5
        k += 1
    out.store(t + k * 1000)


@ft.kernel
def while_skip_stop(out: ft.Out[f32], x: ft.In[f32], n: int, limit: f32):
    """while with continue and a break on tile data; the counter is used after the loop."""
    t = ft.load_like(x, out)
    acc = ft.zeros(out.tile_shape, f32)
    k = 0
    while k < n:
        k += 1
        if k % 3 == 0:
            continue
        acc = acc + t * k
        if k > 1:
            if ft.max(acc) > limit:
                break
    out.store(acc + k * 1000)


@ft.kernel
def for_skip_stop(out: ft.Out[f32], x: ft.In[f32], n: int, limit: f32):
    """for with continue and a break on tile data (a Tile IR loop); the loop variable and a
    counter are used after the loop."""
    t = ft.load_like(x, out)
    acc = ft.zeros(out.tile_shape, f32)
    steps = 0
    last = -1
    for k in range(2, n):
        last = k
        if k % 2 == 1:
            continue
        acc = acc + t
        steps += 1
        if ft.max(acc) > limit:
            break
    out.store(acc + steps * 1000 + last * 100000)


@ft.kernel
def for_continue(out: ft.Out[f32], x: ft.In[f32], n: int):
    """for with only continue: stays a Tile IR for; the Out tile is read and written in it."""
    out.store(ft.zeros(out.tile_shape, f32))
    for k in range(n):
        if k % 2 == 0:
            continue
        if k % 3 == 0:
            out.store(out.load() - 1.0)
            continue
        out.store(out.load() + ft.load_like(x, out) * k)


@ft.kernel
def nested_break(out: ft.Out[f32], x: ft.In[f32], n: int, limit: f32):
    """A break leaves only the inner loop; the outer one goes on."""
    t = ft.load_like(x, out)
    acc = ft.zeros(out.tile_shape, f32)
    for i in range(n):
        j = 0
        while True:
            j += 1
            acc = acc + t
            if ft.max(acc) > limit * (i + 1) or j >= 4:
                break
        acc = acc - 1.0
    out.store(acc)


# returns ----------------------------------------------------------------------------------------


@ft.kernel
def store_unless_positive(out: ft.Out[f32], x: ft.In[f32]):
    """An early return: tiles whose elements are all positive are left unwritten."""
    t = ft.load_like(x, out)
    if ft.min(t) > 0:
        return
    else:
        t = t * 2.0
    out.store(t)


@ft.kernel
def return_from_loops(out: ft.Out[f32], x: ft.In[f32], n: int, limit: f32):
    """A return inside a while inside a for: both loops end, nothing after them runs."""
    t = ft.load_like(x, out)
    acc = ft.zeros(out.tile_shape, f32)
    for i in range(n):
        j = 0
        while j < i:
            acc = acc + t
            j += 1
            if ft.max(acc) > limit:
                out.store(acc)
                return
    out.store(-acc)


@fl.func
def scaled_down(t, limit):
    """t scaled to at most limit, with two early returns."""
    top = ft.max(abs(t))
    if top <= limit:
        return t
    if top > 4 * limit:
        return t * 0.25
    return t * (limit / top)


@fl.func
def doubled_past(t, limit, n):
    """t doubled until its maximum passes limit (at most n times), or -t: a return in a loop."""
    for _ in range(n):
        if ft.max(t) > limit:
            return t
        t = t * 2.0
    return -t


@fl.func
def signed(t, s):
    if s > 0:
        return t
    return -t


@ft.kernel
def sign_by(out: ft.Out[f32], x: ft.In[f32], s: f32):
    """An early return in a device function (the GPU lowering used to drop it: always -t)."""
    out.store(signed(ft.load_like(x, out), s))


@ft.kernel
def early_returns_in_functions(out: ft.Out[f32], x: ft.In[f32], n: int, limit: f32):
    t = ft.load_like(x, out)
    out.store(scaled_down(t, limit) + doubled_past(t, limit, n))


# a loop's result that a branch may keep (tests/tile/test_loop_results.py, with Tile IR loop) ----


@ft.kernel
def count_or_load_while(out: ft.Out, x: ft.In, n: int):
    acc = ft.zeros(out.tile_shape, out.dtype)
    k = 0
    while k < n:
        acc = acc + 1
        k += 1
    t = ft.load_like(x, out)
    if out.tile_index[0] % 2 == 0:  # no else: the odd rows of tiles keep the loop's result
        acc = t + 1
    out.store(acc)


@ft.kernel
def count_or_load_break(out: ft.Out, x: ft.In, n: int):
    acc = ft.zeros(out.tile_shape, out.dtype)
    for k in range(1000):
        if k == n:
            break
        acc = acc + 1
    if out.tile_index[0] % 2 != 0:
        pass  # the then branch keeps the loop's result
    else:
        acc = ft.load_like(x, out) + 1
    out.store(acc)
