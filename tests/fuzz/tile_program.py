"""Random valid tile kernels (``@ft.kernel``) from a seed: generation, source, arguments, the
reference (``tile_tree`` evaluated per tile block with NumPy), the CPU launch and the GPU compile.

A kernel writes 1-2 outputs partitioned into (tm, tn) or (t,) tiles over tensors whose extents
are not multiples of the tile (edge tiles are partial; loads read zero past the edge). It loads
inputs like the output tile, as a row ((tn,)) or a column ((tm, 1)); mixes dtypes through
elementwise arithmetic with literals and scalars, comparisons, ``ft.where``, math functions,
``.astype``, reductions (sum/max/min, with and without keepdims) broadcast back, ``.T`` and
``ft.broadcast``; accumulates in ``for`` loops, branches on scalars, and may run an
``ft.mma`` loop over a K dimension that is not a multiple of its block. Then, with draws that
follow all of those, ``tile_control`` swaps in newer math and inserts control flow: ``while``,
``break``/``continue``, early ``return``, helpers, and reductions to scalars.
"""
from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

import fearless as fl
from fearless import dtypes
from fearless.dtypes import DType
from fearless.kernel.params import bind
from tests.fuzz import classify, data, rules, scalar, tile_control
from tests.fuzz.gen_simt import ARITH, BITS, PREDS, Draws, _int_window
from tests.fuzz.options import Options
from tests.fuzz.rules import Invalid
from tests.fuzz.tile_tree import (NEWER_MATH, TILE_MATH, Block, TAssign, TAstype, TBin, TCmp,
                                  TFor, TFull, TIf, TIndex, TLit, TLoad, TMath, TMma, TName,
                                  TReduce, TShape, TStore, TUnary, TVar, TWhere, broadcast)
from tests.fuzz.stmts import ReturnSignal, walk
from tests.fuzz.vector import TV
from tests.fuzz.tree import fl_name

HEADER = '''"""Fuzz tile kernel (tests/fuzz), seed {seed}. Reproduce: {repro}"""
import math

import numpy as np

import fearless as fl
from fearless import tile as ft

'''
MMA_DTYPES = (dtypes.f16, dtypes.bf16, dtypes.f32, dtypes.f64)


@dataclass
class TensorParam:
    name: str
    dtype: DType
    shape: tuple
    role: str  # out, like (the output's shape), row, col, mma-a, mma-b


@dataclass
class TileGen(Draws):
    rng: random.Random
    opts: Options
    tile: tuple = ()
    shape: tuple = ()
    tensors: list = field(default_factory=list)
    scalars: list = field(default_factory=list)
    vars: list = field(default_factory=list)
    counter: int = 0
    helpers: list = field(default_factory=list)  # tile_flow.TFunc
    control: bool = False    # tile_control's draws: scalar reductions and newer math too
    in_helper: bool = False  # the kernel's own names (out.tile_index) are not visible

    @property
    def out(self) -> str:
        return self.tensors[0].name

    def literal(self, d: DType | None = None) -> TLit:
        if d is not None and d.is_bool:
            return TLit(self.chance(0.5))
        if d is not None and d.is_int:
            lo, hi = rules.int_range(d)
            return TLit(self.rng.choice([v for v in (0, 1, 2, 3, 5, 7, 100, 127, -1, -3)
                                         if lo <= v <= hi]))
        return TLit(self.rng.choice((0, 1, 2, -1, 0.5, 1.5, -2.5, 0.1, 3.0, 100.0)))

    # expressions ------------------------------------------------------------------------------

    def leaf(self):
        r = self.rng.random()
        tiles = [v for v in self.vars if v.shape is not None]
        if tiles and r < 0.55:
            v = self.rng.choice(tiles)
            return TName(v.name, v.t, v.shape)
        if r < 0.65:
            scalars = [v for v in self.vars if v.shape is None]
            if scalars:
                v = self.rng.choice(scalars)
                return TName(v.name, v.t)
        if r < 0.72 and not self.in_helper:
            return TIndex(self.out, self.rng.randrange(len(self.tile)))
        if r < 0.8:
            d = self.dtype()
            return TFull(self.rng.choice(self.shapes()), self.literal(d).value, d)
        return self.literal()

    def shapes(self):
        if len(self.tile) == 1:
            return [self.tile, (1,)]
        tm, tn = self.tile
        return [self.tile, (tn,), (tm, 1), (1, tn)]

    def expr(self, pre: list, depth: int):
        for _ in range(12):
            try:
                e = self._expr(pre, depth)
                if e.shape is not None and broadcast(e.shape, self.tile) != self.tile:
                    raise Invalid("does not broadcast to the tile")
                if self.opts.skip_known and classify.known_under([e]):
                    raise Invalid("a known class's construct")
                return e
            except Invalid:
                continue
        return self.leaf()

    def tile_expr(self, pre: list, depth: int):
        for _ in range(12):
            e = self.expr(pre, depth)
            if e.shape is not None:
                return e
        v = self.rng.choice([v for v in self.vars if v.shape is not None])
        return TName(v.name, v.t, v.shape)

    def _expr(self, pre, depth):
        if depth <= 0 or self.chance(0.2):
            return self.leaf()
        sub = depth - 1
        kind = self.rng.choice(("bin", "bin", "bin", "bin", "cmp", "where", "math", "math",
                                "unary", "astype", "astype", "reduce", "shape", "pow") +
                               (("scalar", "scalar", "full") if self.control else ()))
        if kind in ("scalar", "full"):
            return tile_control.scalar_in_tile(self, pre, sub, kind)
        if kind == "bin":
            return self.binop(self.rng.choice(ARITH + ARITH + BITS), self.expr(pre, sub),
                              self.expr(pre, sub))
        if kind == "cmp":
            return TCmp(self.rng.choice(PREDS), self.expr(pre, sub), self.expr(pre, sub))
        if kind == "where":
            cond = TCmp(self.rng.choice(PREDS), self.tile_expr(pre, sub), self.expr(pre, sub))
            return TWhere(cond, self.expr(pre, sub), self.expr(pre, sub))
        if kind == "math":
            if self.chance(0.25):
                op = self.rng.choice(("max", "min"))
                return TMath(op, [self.tile_expr(pre, sub), self.expr(pre, sub)],
                             f"ft.{op}imum")
            fn = self.rng.choice(TILE_MATH + (tuple(NEWER_MATH) if self.control else ()))
            if fn in NEWER_MATH:
                spelling = NEWER_MATH[fn]
            else:
                spelling = f"ft.{fn}" if fn == "rsqrt" or (fn in ("exp", "exp2", "log", "sqrt",
                                                                  "tanh") and self.chance(0.7)) \
                    else f"math.{fn}"
            return TMath(fn, [self.tile_expr(pre, sub)], spelling)
        if kind == "pow":  # mostly small literal exponents: a random one overflows
            exponent = self.literal() if self.chance(0.7) else self.expr(pre, sub)
            return TMath("pow", [self.tile_expr(pre, sub), exponent], "**")
        if kind == "unary":
            return TUnary(self.rng.choice(("neg", "invert", "abs")), self.tile_expr(pre, sub))
        if kind == "astype":
            return self.astype(pre, self.tile_expr(pre, sub), self.dtype())
        if kind == "reduce":
            a = self.tile_expr(pre, sub)
            axis = self.rng.randrange(len(a.shape))
            keep = len(a.shape) == 1 or self.chance(0.5)
            return TReduce(self.rng.choice(("sum", "sum", "max", "min")), a, axis, keep,
                           method=self.chance(0.3))
        a = self.tile_expr(pre, sub)
        if self.chance(0.5) and len(a.shape) == 2 and a.shape[0] == a.shape[1]:
            return TShape("T", a)
        return TShape("broadcast", a, self.tile)

    def binop(self, op, a, b):
        d = rules.common(a.t, b.t, op)
        if op in ("floordiv", "mod") and not d.is_float and self.opts.guard("int-div"):
            a, b = _non_negative(a), TBin("or", _non_negative(b), TLit(1))
        if op in ("shl", "shr") and self.opts.guard("shift"):
            b = TBin("and", b, TLit(d.bits - 1))
        return TBin(op, a, b)

    def astype(self, pre, e, d: DType):
        """``e.astype(d)``; a float tile goes to an integer only from inside d's range."""
        if e.t.is_float and d.is_int and self.opts.guard("float-int-cast"):
            x = self.hoist(pre, e)
            lo, lo_op, hi, hi_op = _int_window(e.t, d)
            inside = TBin("and", TCmp("ge" if lo_op == "le" else "gt", x, TLit(lo)),
                          TCmp(hi_op, x, TLit(hi)))
            return TAstype(TWhere(inside, x, TLit(0)), d)
        return TAstype(e, d)

    def hoist(self, pre, e):
        if isinstance(e, TName):
            return e
        name = self.fresh("t")
        pre.append(TAssign(name, e))
        self.vars.append(TVar(name, e.t, e.shape))
        return TName(name, e.t, e.shape)

    def coerce(self, pre, e, d: DType, implicit: bool):
        """``e`` as a (d, tile) value: implicit (a store) or exact (a loop-carried variable)."""
        if e.shape is None:
            raise Invalid("a scalar where a tile is needed")
        if e.t is not d and not (implicit and rules.implicit_ok(e.t, d)):
            e = self.astype(pre, e, d)
        if e.shape != self.tile:
            e = TShape("broadcast", e, self.tile)
        return e

    # statements -------------------------------------------------------------------------------

    def statement(self, depth: int) -> list:
        pre: list = []
        kind = self.rng.choice(("new", "new", "new", "acc", "if") if depth < 1 else ("new",))
        if kind == "new":
            e = self.expr(pre, 3)
            if e.const:  # a name bound to a constant would be that constant
                raise Invalid("a constant variable")
            name = self.fresh("v")
            self.vars.append(TVar(name, e.t, e.shape))
            return pre + [TAssign(name, e)]
        if kind == "acc":
            d = self.rng.choice(rules.INTS + rules.FLOATS)
            name, k = self.fresh("acc"), self.fresh("k")
            self.vars.append(TVar(k, dtypes.i64, None))
            step = self.coerce(pre, TBin(self.rng.choice(("add", "sub", "mul")),
                                         TName(name, d, self.tile), self.expr(pre, 2)),
                               d, implicit=False)
            if step.t is not d:
                raise Invalid("the step changes the accumulator's type")
            self.vars.remove(next(v for v in self.vars if v.name == k))
            self.vars.append(TVar(name, d, self.tile))
            body = pre + [TAssign(name, step)]
            return [TAssign(name, TFull(self.tile, 0, d)),
                    TFor(k, self.rng.randint(1, 3), body)]
        cond = self.condition()
        tiles = [v for v in self.vars if v.shape == self.tile and not rules.is_weak(v.t)]
        if not tiles:
            return []
        v = self.rng.choice(tiles)
        inner: list = []
        mark = len(self.vars)
        e = self.coerce(inner, self.expr(inner, 2), v.t, implicit=False)
        del self.vars[mark:]  # temporaries of the branch are not visible after it
        return [TIf(cond, inner + [TAssign(v.name, e)], [])]

    def condition(self):
        if self.scalars and self.chance(0.6):
            name, d = self.rng.choice(self.scalars)
            return TCmp(self.rng.choice(PREDS), TName(name, d), self.literal(d))
        axis = self.rng.randrange(len(self.tile))
        return TCmp("eq", TBin("mod", TIndex(self.out, axis), TLit(2)), TLit(0))

    def mma(self) -> list:
        """acc = ft.zeros((tm, tn), f32); for k: acc = ft.mma(load a, load b, acc)."""
        tm, tn = self.tile
        d = self.rng.choice(MMA_DTYPES)
        bk = self.rng.choice((16, 32))
        kdim = self.rng.choice((16, 24, 40, 64))
        a = TensorParam(self.fresh("xa"), d, (self.shape[0], kdim), "mma-a")
        b = TensorParam(self.fresh("xb"), d, (kdim, self.shape[1]), "mma-b")
        self.tensors += [a, b]
        acc_d = dtypes.f64 if d is dtypes.f64 else dtypes.f32
        name, k = self.fresh("acc"), self.fresh("k")
        kv = TName(k, dtypes.i64)
        load_a = TLoad(a.name, d, (tm, bk), [TIndex(self.out, 0), kv])
        load_b = TLoad(b.name, d, (bk, tn), [kv, TIndex(self.out, 1)])
        step = TMma(load_a, load_b, TName(name, acc_d, self.tile), d)
        self.vars.append(TVar(name, acc_d, self.tile))
        return [TAssign(name, TFull(self.tile, 0, acc_d)),
                TFor(k, None, [TAssign(name, step)], cdiv=(a.name, 1, bk))]


def _non_negative(e):
    if rules.is_weak(e.t):
        return e if e.value >= 0 else TBin("and", e, TLit(127))
    if not e.t.is_signed:
        return e
    return TBin("and", e, TLit((1 << (e.t.bits - 1)) - 1))


@dataclass
class TileProgram:
    seed: int
    name: str
    gen: TileGen
    body: list
    outputs: list
    kind = "tile"

    @property
    def inputs(self):
        return [t for t in self.gen.tensors if t.role != "out"]

    def source(self, repro: str) -> str:
        g = self.gen
        params = [f"{t.name}: ft.Out[{fl_name(t.dtype)}]" for t in self.outputs]
        params += [f"{t.name}: ft.In[{fl_name(t.dtype)}]" for t in self.inputs]
        params += [f"{n}: {fl_name(d)}" for n, d in g.scalars]
        lines = HEADER.format(seed=self.seed, repro=repro).splitlines()
        for h in g.helpers:
            lines += [""] + h.render() + [""]
        lines += ["", "@ft.kernel", f"def {self.name}({', '.join(params)}):"]
        for s in self.body:
            lines += s.render("    ")
        return "\n".join(lines) + "\n"

    def arguments(self) -> dict:
        rng = np.random.default_rng(self.seed)
        args = {}
        for t in self.inputs:
            if t.role.startswith("mma"):  # quarters in [-2, 2]: products and sums stay small
                args[t.name] = (rng.integers(-8, 9, t.shape) / 4).astype(t.dtype.numpy)
            else:
                args[t.name] = data.random_values(rng, t.dtype, t.shape)
        for n, d in self.gen.scalars:
            args[n] = data.random_scalar(rng, d)
        for t in self.outputs:
            args[t.name] = np.full(t.shape, data.poison_value(t.dtype), t.dtype.numpy)
        return args

    def _call_args(self, args: dict) -> list:
        out = [fl.asarray(args[t.name].copy()).partition(self.gen.tile) for t in self.outputs]
        out += [fl.asarray(args[t.name].copy()) for t in self.inputs]
        return out + [args[n] for n, _ in self.gen.scalars]

    def launch(self, kernel, args: dict) -> dict:
        self._args = args
        results = kernel(*self._call_args(args)).sync()
        return {t.name: r.unpartition().numpy() for t, r in zip(self.outputs, results)}

    def gpu_signature(self, kernel):
        """The types and constants of a GPU launch of these arguments (fresh allocations are
        256-byte aligned, so the layout facts are those of compiling ahead of time)."""
        values = bind(kernel.name, kernel.params, self._call_args(self._args), {})
        types, _, constants, *_ = kernel._signature(values, "cpu", ahead=True)
        return types, constants

    def compile_gpu(self, kernel, arch: str) -> None:
        """Compile the launched specialisation for ``arch`` through Tile IR and tileiras."""
        kernel.inspect("cubin", *self.gpu_signature(kernel), arch)

    def compile_cached(self, kernel, arch: str) -> None:
        """Compile as a GPU launch would, into the disk cache (device mode's workers)."""
        kernel.compile_for(*self.gpu_signature(kernel), "cuda", arch)

    def reference(self, args: dict, profile: scalar.Profile) -> data.Expected:
        tensors = {t.name: args[t.name].astype(np.float64) if t.dtype.is_float
                   else args[t.name] for t in self.inputs}
        exp = data.Expected(stats=Counter())
        tile = self.gen.tile
        grid = [-(-n // b) for n, b in zip(self.outputs[0].shape, tile)]
        tags = self.tags()
        for t in self.outputs:
            exp.values[t.name] = args[t.name].astype(np.float64) if t.dtype.is_float else \
                args[t.name].copy()
            exp.errors[t.name] = np.zeros(t.shape)
            exp.checked[t.name] = np.ones(t.shape, bool)
            exp.tags[t.name] = np.empty(t.shape, dtype=object)
            exp.tags[t.name].fill(tags)
        for coords in np.ndindex(*grid):
            blk = Block(coords, tensors, profile, self.gen.opts.relax)
            for n, d in self.gen.scalars:
                blk.vars[n] = _scalar_tv(args[n], d)
            try:
                for s in self.body:
                    s.ev(blk)
            except ReturnSignal:
                pass
            exp.stats["blocks"] += 1
            if blk.unsure:
                exp.stats[f"uncertain: {blk.unsure}"] += 1
            for t in self.outputs:
                window = tuple(slice(c * b, min(c * b + b, n))
                               for c, b, n in zip(coords, tile, t.shape))
                part = tuple(slice(0, w.stop - w.start) for w in window)
                v = blk.vars.get(f"<stored {t.name}>")
                if v is None:  # returned before storing: the tile keeps its poison
                    exp.stats["unwritten elements"] += exp.checked[t.name][window].size
                    v = TV(exp.values[t.name][window], exp.errors[t.name][window])
                    part = tuple(slice(None) for _ in window)
                exp.values[t.name][window] = v.v[part]
                exp.errors[t.name][window] = v.e[part]
                bad = v.bad[part] | bool(blk.unsure)
                exp.checked[t.name][window] = ~bad
                exp.stats["unchecked elements"] += int(bad.sum())
        for t in self.outputs:
            exp.values[t.name] = exp.values[t.name].astype(t.dtype.numpy)
        return exp


    def tags(self) -> frozenset:
        """The operations of the whole kernel that a mismatch may come from (as ``scalar``'s
        per-thread tags, for every element of a tile kernel)."""
        out = set()
        for node in walk([*self.body, *(s for h in self.gen.helpers for s in h.body)]):
            if isinstance(node, TMath) and node.fn not in ("min", "max"):
                out.add(f"math.{node.fn}")
            elif isinstance(node, TBin) and node.op in ("floordiv", "mod") and not node.const \
                    and node.t.is_float:
                out.add("float //,%")
            elif isinstance(node, TReduce) and node.kind == "argmax":
                out.add("argmax")
            elif isinstance(node, TReduce) and node.t.is_float:
                out.add(f"float {node.kind}")
            elif isinstance(node, TMma):
                out.add("mma")
            for e, d in node.conversions():
                if d is dtypes.bf16 and not rules.is_weak(e.t) and (
                        e.t is dtypes.f64 or (e.t.is_int and e.t.bits >= 32)):
                    out.add("bf16<-wide")
        return frozenset(out)


def _scalar_tv(value, d: DType):
    return TV(np.asarray(float(value) if d.is_float else value,
                         dtype=np.float64 if d.is_float else d.numpy))


def generate(seed: int, opts: Options, rng: random.Random) -> TileProgram:
    g = TileGen(rng, opts)
    mma = rng.random() < 0.25
    if mma:
        g.tile = (rng.choice((16, 32)), rng.choice((16, 32)))
    elif rng.random() < 0.25:
        g.tile = (rng.choice((8, 16, 32, 64)),)
    else:
        g.tile = (rng.choice((1, 2, 4, 8, 16)), rng.choice((4, 8, 16, 32)))
    g.shape = tuple(b * rng.randint(1, 3) - rng.randrange(b) for b in g.tile)
    outputs = [TensorParam(f"o{k}", g.dtype(), g.shape, "out")
               for k in range(rng.choice((1, 1, 2)))]
    g.tensors = list(outputs)
    body: list = []
    for k in range(rng.randint(1, 3)):
        role = rng.choice(("like", "like", "row", "col")) if len(g.tile) == 2 else "like"
        d = g.dtype()
        shape = g.shape if role == "like" else (g.shape[1],) if role == "row" else \
            (g.shape[0], 1)
        x = TensorParam(f"x{k}", d, shape, role)
        g.tensors.append(x)
        name = g.fresh("a")
        if role == "like":
            load = TLoad(x.name, d, g.tile, None, g.out)
        elif role == "row":
            load = TLoad(x.name, d, (g.tile[1],), [TIndex(g.out, 1)])
        else:
            load = TLoad(x.name, d, (g.tile[0], 1), [TIndex(g.out, 0), TLit(0)])
        body.append(TAssign(name, load))
        g.vars.append(TVar(name, d, load.shape))
    for k in range(rng.choice((0, 0, 1, 2))):
        g.scalars.append((f"s{k}", g.dtype()))
        g.vars.append(TVar(f"s{k}", g.scalars[-1][1], None))
    if mma:
        body += g.mma()
    for _ in range(rng.randint(1, 4)):
        mark = len(g.vars)
        try:
            body += g.statement(0)
        except Invalid:
            del g.vars[mark:]
    for t in outputs:
        pre: list = []
        for _ in range(10):
            try:
                e = g.coerce(pre, g.tile_expr(pre, 3), t.dtype, implicit=True)
                store = TStore(t.name, t.dtype, g.tile, e)
                if opts.skip_known and classify.known_under([store]):
                    raise Invalid("a known class's construct")
                break
            except Invalid:
                pre.clear()
        else:
            store = TStore(t.name, t.dtype, g.tile, TFull(g.tile, 0, t.dtype))
        body += pre + [store]
    # drawn after the kernel's own draws: the earlier fuzzer's kernel, with newer math swapped
    # in and control flow added (tile_control)
    tile_control.newer_math(g, body)
    body = tile_control.add(g, body, outputs)
    return TileProgram(seed, f"t{seed}", g, body, outputs)
