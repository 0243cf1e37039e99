"""A tile block that stores its tile and reads it back, or stores it twice, sees its own writes.

Tile IR orders two memory operations only when a token connects them: the memory_order pass
(passes/memory_order.py) says which loads and stores of an Out tensor must be ordered, and the
lowering (backends/tileir/lower.py) threads tokens per Out tensor accordingly. Checked three
ways: the emitted Tile IR, read back with our reader, has every load and store of an Out tensor
(and every gather, scatter and atomic, through pointer tiles, of an Out or Atomic tensor)
waiting (through joins, loop-carried tokens and ``if`` results) for each earlier conflicting
operation on it, while loads of In tensors stay unordered; tileiras compiles those kernels for
sm_80 and sm_90; and the kernels compute the float64 NumPy reference on the CPU backend and on
the GPU (``pytest -m gpu``), the GPU also against the CPU backend.
"""
from __future__ import annotations

import numpy as np
import pytest

import fearless as fl
from fearless import f16, f32, i32, i64
from fearless.backends.tileir import builder as tb
from fearless.backends.tileir import tileiras
from fearless.backends.tileir.lower import abi
from fearless.backends.tileir.reader import decode
from fearless.backends.tileir.tir import F32, I32, Module, ptr, tensor_view, tile
from fearless.compiler import compile_tile
from fearless.ir import types as T
from tests.support import BACKENDS, on_cpu
from tests.tile import memory_kernels as M
from tests.tile import tile_kernels as K

U16, U32 = 2.0 ** -11, 2.0 ** -24  # unit roundoff of f16 and f32

OUT1 = T.TensorView(f32, 1, T.Role.OUT, (128,))
IN1 = T.TensorView(f32, 1, T.Role.IN)
ROPE = (T.TensorView(f16, 2, T.Role.OUT, (16, 64)), T.TensorView(f16, 2, T.Role.IN),
        T.TensorView(f16, 2, T.Role.IN), T.TensorView(f32, 2, T.Role.IN),
        T.TensorView(f32, 2, T.Role.IN))
OUT2, IN2 = T.TensorView(f32, 2, T.Role.OUT, (16, 32)), T.TensorView(f32, 2, T.Role.IN)
KERNELS = {  # name: (kernel, IR parameter types, constants)
    "store_load_store": (K.store_load_store, (OUT1, IN1), {}),
    "store_load_in_loop": (K.store_load_in_loop, (OUT1, IN1, T.Scalar(i64)), {}),
    "store_load_in_branch": (K.store_load_in_branch, (OUT1, IN1, T.Scalar(i64)), {}),
    "rmsnorm_rope": (K.rmsnorm_rope, ROPE, {"half": 16}),
    "read_own_tile": (K.read_own_tile, (OUT2, OUT2, IN2), {}),
    "reverse_tiles": (M.reverse_tiles, (OUT1, IN1), {}),
    "gather_own_after_scatter": (M.gather_own_after_scatter, (OUT1, IN1), {}),
    "scatter_wrapped": (M.scatter_wrapped, (T.TensorView(i32, 1, T.Role.OUT, (64,)),
                                            T.TensorView(i32, 1, T.Role.IN)), {}),
    "scatter_max": (M.scatter_max, (OUT1, T.TensorView(f32, 1, T.Role.ATOMIC),
                                    T.TensorView(i32, 1, T.Role.IN), IN1), {}),
    "tickets": (M.tickets, (T.TensorView(i32, 1, T.Role.OUT, (64,)),
                            T.TensorView(i32, 1, T.Role.ATOMIC)), {}),
}


# the check over the emitted Tile IR -------------------------------------------------------------

_READS = ("load_view_tko", "load_ptr_tko")
_MEMORY = _READS + ("store_view_tko", "store_ptr_tko", "atomic_rmw_tko", "atomic_cas_tko")
_POINTERS = {"load_ptr_tko": "source", "store_ptr_tko": "destination",
             "atomic_rmw_tko": "pointers", "atomic_cas_tko": "pointers"}


def _walk(block, path=()):
    """(op, path) in program order; path: the (region op, region index) pairs around the op."""
    for op in block.ops:
        yield op, path
        for k, region in enumerate(op.regions):
            yield from _walk(region, path + ((op, k),))


def _param_of(op) -> int:
    """The entry parameter index of the pointer under a memory op's partition view or pointer
    tile (through offset, ptr_to_ptr, broadcast, reshape and assume)."""
    if op.name in _POINTERS:
        value = op.fields[_POINTERS[op.name]]
    else:
        value = op.fields["view"].owner.fields["source"].owner.fields["base"]
    while value.owner is not None and not hasattr(value.owner, "params"):
        fields = value.owner.fields
        value = fields.get("ptr") or fields.get("source") or fields["value"]
    return value.index


def _token_sources(fn):
    """A function from a token value to the ids of the memory ops it waits for, transitively:
    through join_tokens, the token operands of memory ops, loop-carried block arguments (their
    init and every `continue`), and the results of `for` and `if` (every `continue`/`yield`)."""
    feeds: dict[int, list] = {}  # id(token value) -> the values it is made from
    for op, _ in _walk(fn.body):
        if op.name == "for":
            inits = op.fields["operands"][3:]
            body = op.regions[0]
            nexts = body.ops[-1].fields["operands"]
            for k, (arg, result) in enumerate(zip(body.args[1:], op.results)):
                feeds[id(arg)] = feeds[id(result)] = [inits[k], nexts[k]]
        elif op.name == "if":
            for k, result in enumerate(op.results):
                feeds[id(result)] = [r.ops[-1].fields["operands"][k] for r in op.regions]
        elif op.name == "join_tokens":
            feeds[id(op.result)] = list(op.fields["tokens"])
        elif op.name in _MEMORY:
            done = op.results[-1]
            feeds[id(done)] = [op.fields["token"]] if op.fields["token"] is not None else []
    producer = {id(op.results[-1]): op for op, _ in _walk(fn.body) if op.name in _MEMORY}

    def sources(token) -> set[int]:
        seen, todo, found = set(), [token], set()
        while todo:
            v = todo.pop()
            if id(v) in seen:
                continue
            seen.add(id(v))
            if id(v) in producer:
                found.add(id(producer[id(v)]))
            todo += feeds.get(id(v), [])
        return found
    return sources


def _exclusive(p, q) -> bool:
    """Two ops in different branches of one `if`."""
    return any(a[0] is b[0] and a[1] != b[1] for a in p for b in q if a[0].name == "if")


def _in_one_loop(p, q) -> bool:
    return any(a[0] is b[0] for a in p for b in q if a[0].name == "for")


def unordered_pairs(module: Module, roles: list) -> list[str]:
    """Every pair of memory operations that Tile IR may reorder although they conflict: A and B on
    the same Out tensor, one of them a store, A before B in program order (or A anywhere in a loop
    body around B: the previous iteration), and B's token not waiting for A. ``roles``: the
    ``T.Role`` of each entry parameter (None for non-tensors). A load of an In tensor that waits
    for anything is reported too (it would serialise for nothing)."""
    (fn,) = module.functions
    sources = _token_sources(fn)
    ops = [(op, path, _param_of(op)) for op, path in _walk(fn.body) if op.name in _MEMORY]
    problems = []
    for j, (b, pb, tb_) in enumerate(ops):
        waits = sources(b.fields["token"]) if b.fields["token"] is not None else set()
        if roles[tb_] not in (T.Role.OUT, T.Role.ATOMIC):
            if waits:
                problems.append(f"op {j} (a load of In parameter {tb_}) waits for {len(waits)}")
            continue
        for i, (a, pa, ta) in enumerate(ops):
            if ta != tb_ or (a.name in _READS and b.name in _READS) or _exclusive(pa, pb):
                continue
            if (i < j or _in_one_loop(pa, pb)) and id(a) not in waits:
                problems.append(f"op {j} ({b.name}) does not wait for op {i} ({a.name})")
    return problems


def _tileir(name: str, arch="sm_90") -> tuple[bytes, list]:
    kernel, types, constants = KERNELS[name]
    compiled = compile_tile(kernel.captured, kernel._ir_params(types), constants, arch, "tileir")
    roles = [getattr(types[s.param], "role", None) for s in abi(types).slots]
    return compiled.tileir, roles


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_each_memory_op_waits_for_the_conflicting_ones_before_it(name):
    data, roles = _tileir(name)
    module = decode(data)
    assert unordered_pairs(module, roles) == []
    (fn,) = module.functions
    writes = [op for op, _ in _walk(fn.body) if op.name in _MEMORY and op.name not in _READS]
    assert len(writes) >= 2  # the kernels are what this test is about


def test_the_check_finds_a_load_that_ignores_the_store_before_it():
    m = Module((13, 4))
    fn = m.entry("bad", [tile(ptr(F32)), tile(I32)])
    b: tb.Builder = fn.builder()
    p, n = fn.params
    tv = b.make_tensor_view(p, tensor_view(F32, (None,), (1,)), [n])
    pv = b.make_partition_view(tv, (128,))
    token = b.make_token()
    bx, _, _ = b.get_tile_block_id()
    x, _ = b.load_view_tko(pv, [bx], token=token)
    stored = b.store_view_tko(x, pv, [bx], token=token)
    again, loaded = b.load_view_tko(pv, [bx], token=token)  # ignores `stored`
    b.store_view_tko(again, pv, [bx], token=b.join_tokens([stored, loaded]))
    b.return_()
    problems = unordered_pairs(decode(m.encode()), [T.Role.OUT, None])
    assert problems == ["op 1 (store_view_tko) does not wait for op 0 (load_view_tko)",
                        "op 2 (load_view_tko) does not wait for op 1 (store_view_tko)",
                        "op 3 (store_view_tko) does not wait for op 0 (load_view_tko)"]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_tileiras_compiles_the_ordered_kernels(name, arch):
    tc = tileiras.find()
    if tc is None:
        pytest.skip("tileiras is not installed (pip install 'fearless[tile]')")
    data, _ = _tileir(name, arch)
    assert tc.compile(data, arch, kernel=name)[:4] == b"\x7fELF"


# running them -----------------------------------------------------------------------------------

def rand(shape, seed, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def poisoned(shape, dtype=f32):
    return fl.full(shape, np.nan, dtype)


def _store_load_store(xh):
    out, _ = K.store_load_store(poisoned(xh.size).partition(128), fl.asarray(xh)).sync()
    return out.unpartition().numpy()


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_store_then_load_back_then_store(backend):
    xh = rand(1000, 1)  # 7 whole tiles and a partial one
    got = _store_load_store(xh)
    want = (xh.astype(np.float64) * 2 + 1) * 3
    # two f32 roundings (the + 1 and the * 3), each within one unit roundoff of the result
    assert np.all(np.abs(got - want) <= 2.01 * U32 * np.abs(want))
    if backend == "cuda":
        assert np.all(np.abs(got - on_cpu(lambda: _store_load_store(xh)))
                      <= 4.02 * U32 * np.abs(want))


def _loop(xh, n):
    out, _, _ = K.store_load_in_loop(poisoned(xh.size).partition(128), fl.asarray(xh),
                                     n).sync()
    return out.unpartition().numpy()


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_store_and_load_back_in_a_loop(backend):
    xh, n = rand(700, 2), 6
    got = _loop(xh, n)
    y, bound = xh.astype(np.float64), np.zeros(xh.size)
    for k in range(n):  # y <- 2 y + k: one rounding per step, doubled by every later step
        y = 2 * y + k
        bound = 2 * bound + U32 * np.abs(y)
    assert np.all(np.abs(got - y) <= 1.01 * bound)
    if backend == "cuda":
        assert np.all(np.abs(got - on_cpu(lambda: _loop(xh, n))) <= 2.02 * bound)


def _branch(xh, flip):
    out, _, _ = K.store_load_in_branch(poisoned(xh.size).partition(128), fl.asarray(xh),
                                       flip).sync()
    return out.unpartition().numpy()


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_store_and_load_back_in_both_branches(backend):
    xh = rand(300, 3)
    x = xh.astype(np.float64)
    # negation, x + x, * 4 and halving are exact in f32
    np.testing.assert_array_equal(_branch(xh, 2), -x * 2)
    np.testing.assert_array_equal(_branch(xh, 1), -x * 0.5)
    np.testing.assert_array_equal(_branch(xh, 0), x)


ROWS, COLS, HALF = 48, 64, 16


def _rope_inputs():
    xh = rand((ROWS, COLS), 4, np.float16)
    wh = (1 + 0.25 * rand((1, COLS), 5)).astype(np.float16)
    angle = np.arange(ROWS)[:, None] * 10000.0 ** (-np.arange(HALF) / HALF)[None, :]
    return xh, wh, np.cos(angle).astype(np.float32), np.sin(angle).astype(np.float32)


def _rope(xh, wh, ch, sh):
    out, *_ = K.rmsnorm_rope(poisoned((ROWS, COLS), f16).partition((16, COLS)), fl.asarray(xh),
                             fl.asarray(wh), fl.asarray(ch), fl.asarray(sh), half=HALF).sync()
    return out.unpartition().numpy().astype(np.float64)


def _rope_reference(xh, wh, ch, sh):
    """The float64 result and its error bound. The kernel rounds the normalised row to f16
    (stored, u16 + the f32 work: a 64-term sum, rsqrt and two products, under 2^-16 relative),
    rotates those f16 values in f32 and rounds to f16 once more."""
    t = xh.astype(np.float64)
    v = t / np.sqrt((t * t).mean(1, keepdims=True) + 1e-6) * wh.astype(np.float64)
    c, s = ch.astype(np.float64), sh.astype(np.float64)
    x1, x2 = v[:, :HALF], v[:, HALF:2 * HALF]
    want = v.copy()
    want[:, :HALF] = x1 * c - x2 * s
    want[:, HALF:2 * HALF] = x2 * c + x1 * s
    spread = np.abs(v)  # what the rounding of the stored row can move each result by
    spread[:, :HALF] = np.abs(x1 * c) + np.abs(x2 * s)
    spread[:, HALF:2 * HALF] = np.abs(x2 * c) + np.abs(x1 * s)
    rotated = np.zeros_like(v)
    rotated[:, :2 * HALF] = 1
    bound = (U16 + 2.0 ** -16) * spread + rotated * U16 * np.abs(want) + 2.0 ** -24
    return want, 1.01 * bound


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_fused_rmsnorm_and_partial_rope_stores_twice(backend):
    inputs = _rope_inputs()
    got = _rope(*inputs)
    want, bound = _rope_reference(*inputs)
    assert np.all(np.abs(got - want) <= bound), np.max(np.abs(got - want) - bound)
    if backend == "cuda":
        assert np.all(np.abs(got - on_cpu(lambda: _rope(*inputs))) <= 2 * bound)


def _read_own_tile(xh):
    shape = xh.shape
    out, aux, _ = K.read_own_tile(poisoned(shape).partition((16, 32)),
                                  poisoned(shape).partition((16, 32)), fl.asarray(xh)).sync()
    return out.unpartition().numpy(), aux.unpartition().numpy()


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_every_allowed_read_of_an_output_gives_the_blocks_own_tile(backend):
    """out.load(), ft.load at out.tile_index (in the kernel and in a helper) and ft.load_like of
    an Out all read back what this block stored: x + x + 4 x + 8 aux + 16 aux with aux = 2 x + 1,
    on a 3 x 3 grid with partial edge tiles (grouped tile order on the GPU). Random integers keep
    every step exact."""
    xh = np.random.default_rng(6).integers(-1000, 1000, (40, 70)).astype(np.float32)
    out, aux = _read_own_tile(xh)
    x = xh.astype(np.float64)
    np.testing.assert_array_equal(aux, 2 * x + 1)
    np.testing.assert_array_equal(out, x + x + 4 * x + 8 * (2 * x + 1) + 16 * (2 * x + 1))
