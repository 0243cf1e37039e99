"""One generated SIMT kernel: its source, its arguments and its reference results.

``SimtProgram.reference`` runs the program tree once per thread, in plain Python
(``tree``/``scalar``), over the same arguments the kernel gets, and returns ``data.Expected``.

A 1-d kernel may instead be a grid-stride loop, ``for i in range(fl.thread.index_1d(),
len(o0), fl.thread.grid_size())``, launched with ``stride = (threads, block)`` (fewer threads
than elements, mostly): the reference runs each thread's elements in order in one frame, and a
``return`` ends the thread, leaving its later elements unwritten.
"""
from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

import numpy as np

import fearless as fl
from tests.fuzz import data, gen_simt, scalar
from tests.fuzz.options import Options
from tests.fuzz.scalar import Thread, Undefined, Val
from tests.fuzz.stmts import Jump, ReturnSignal, run, walk
from tests.fuzz.tree import Frame, fl_name

STRIDE_SHARE = 0.3  # of the 1-d kernels are grid-stride loops, launched with (threads, block):
STRIDE_LAUNCHES = ((1, 1), (2, 2), (3, 3), (4, 2), (7, 7), (8, 4), (16, 8), (32, 32), (64, 32),
                   (128, 128))

HEADER = '''"""Fuzz kernel (tests/fuzz), seed {seed}. Reproduce: {repro}"""
import math

import numpy as np

import fearless as fl

'''


@dataclass
class SimtProgram:
    seed: int
    name: str
    dims: int
    shape: tuple
    gen: gen_simt.SimtGen
    body: list
    relaxed: frozenset = frozenset()
    stride: tuple | None = None  # (threads, block) of a grid-stride kernel's launch

    kind = "simt"

    @property
    def params(self) -> list[str]:
        return [a.name for a in self.gen.inputs] + [n for n, _ in self.gen.scalars] + \
            [a.name for a in self.gen.outputs]

    def source(self, repro: str) -> str:
        g = self.gen
        lines = HEADER.format(seed=self.seed, repro=repro).splitlines()
        for h in g.helpers:
            lines += [""] + h.render() + [""]
        params = []
        for a in g.inputs:
            d = fl_name(a.dtype)
            params.append(f"{a.name}: fl.Slice[{d}]" if a.ndim == 1 else
                          f"{a.name}: fl.Array[{d}, 2]")
        params += [f"{n}: {fl_name(d)}" for n, d in g.scalars]
        for a in g.outputs:
            d = fl_name(a.dtype)
            params.append(f"{a.name}: fl.DisjointSlice[{d}]" if a.ndim == 1 else
                          f"{a.name}: fl.DisjointArray[{d}, 2]")
        lines += ["", "@fl.kernel", f"def {self.name}({', '.join(params)}):"]
        o = g.outputs[0].name
        if self.stride:
            lines += [f"    for i in range(fl.thread.index_1d(), len({o}), "
                      f"fl.thread.grid_size()):"]
        elif self.dims == 1:
            lines += ["    i = fl.thread.index_1d()", f"    if i < len({o}):"]
        else:
            lines += ["    r, c = fl.thread.index_2d()",
                      f"    if r < {o}.shape[0] and c < {o}.shape[1]:"]
        for s in self.body:
            lines += s.render("        ")
        return "\n".join(lines) + "\n"

    def arguments(self) -> dict:
        """The kernel's arguments by name, as NumPy arrays and scalars (outputs poisoned)."""
        rng = np.random.default_rng(self.seed)
        args = {}
        for a in self.gen.inputs:
            args[a.name] = data.random_values(rng, a.dtype, self.shape)
        for n, d in self.gen.scalars:
            args[n] = data.random_scalar(rng, d)
        for a in self.gen.outputs:
            args[a.name] = np.full(self.shape, data.poison_value(a.dtype), a.dtype.numpy)
        return args

    def launch(self, kernel, args: dict) -> dict:
        """Run ``kernel`` on the current backend; its outputs as NumPy arrays by name."""
        tensors = {n: fl.asarray(v.copy()) if isinstance(v, np.ndarray) else v
                   for n, v in args.items()}
        if self.stride:
            launch = kernel.prepare(self.stride[0], block=self.stride[1])
        else:
            launch = kernel.prepare(self.shape[0] if self.dims == 1 else self.shape)
        kernel[launch](*(tensors[n] for n in self.params))
        return {a.name: tensors[a.name].numpy() for a in self.gen.outputs}

    def gpu_types(self, kernel) -> tuple:
        """The specialisation the launch compiled (the same on every backend)."""
        (entry,) = [e for k, e in kernel._entries.items() if k[-1] == "cpu"] or \
            list(kernel._entries.values())[:1]
        return entry.types

    def compile_gpu(self, kernel, arch: str) -> None:
        """Compile the launched specialisation through LLVM -> PTX -> cubin for ``arch``."""
        kernel.inspect("cubin", self.gpu_types(kernel), arch)

    def compile_cached(self, kernel, arch: str) -> None:
        """Compile as a GPU launch would, into the disk cache (device mode's workers)."""
        kernel.compile_for(self.gpu_types(kernel), "cuda", arch)

    def reference(self, args: dict, profile: scalar.Profile) -> data.Expected:
        g = self.gen
        arrays = {a.name: data.to_python(args[a.name]) for a in g.inputs}
        outs = {a.name: _vals(data.to_python(args[a.name])) for a in g.outputs}
        arrays.update(outs)
        shape = self.shape
        status = np.ones(shape, dtype=bool)
        tags = np.empty(shape, dtype=object)
        tags.fill(frozenset())
        stats = Counter()
        # a thread's later elements depend on its earlier ones only through a return
        returns = any(isinstance(s, Jump) and s.kind == "return" for s in walk(self.body))
        for elements in self._threads():
            fr = Frame(arrays)
            fr.vars.update({n: Val(data.scalar_value(args[n])) for n, _ in g.scalars})
            ended, unsure = False, None
            for index in elements:
                if ended:  # returned: unwritten (the poison), unless the return was unsure
                    if unsure:
                        stats[f"{unsure} (an earlier element of its thread)"] += 1
                        status[index] = False
                    continue
                th = Thread(profile, self.relaxed)
                fr.vars.update({n: Val(k) for n, k in zip(g.idx, index)})
                try:
                    run(th, fr, self.body)
                except ReturnSignal:
                    ended = True
                except Undefined as exc:
                    stats[f"undefined: {exc}"] += 1
                    status[index] = False
                    ended, unsure = True, "undefined"
                if th.uncertain and status[index]:
                    stats[f"uncertain: {th.uncertain}"] += 1
                    status[index] = False
                    if returns:
                        unsure = unsure or "uncertain"
                tags[index] = frozenset(th.tags)
            stats["threads"] += 1
        exp = data.Expected(stats=stats)
        for a in g.outputs:
            vals = outs[a.name]
            flat = np.array(_flatten(vals), dtype=object).reshape(shape)
            exp.values[a.name] = np.array([v.v for v in flat.flat], dtype=np.float64
                                          if a.dtype.is_float else object).astype(
                a.dtype.numpy).reshape(shape)
            exp.errors[a.name] = np.array([v.e for v in flat.flat], dtype=np.float64).reshape(
                shape)
            exp.checked[a.name] = status
            exp.tags[a.name] = tags
        return exp


    def _threads(self):
        """The elements of each thread, in the order it handles them."""
        if not self.stride:
            return [[index] for index in np.ndindex(*self.shape)]
        threads, n = self.stride[0], self.shape[0]
        return [[(k,) for k in range(t, n, threads)] for t in range(threads)]


def _vals(x):
    return [_vals(v) for v in x] if isinstance(x, list) else Val(x)


def _flatten(x):
    if isinstance(x, list):
        return [v for item in x for v in _flatten(item)]
    return [x]


def generate(seed: int, opts: Options, rng: random.Random) -> SimtProgram:
    dims = 2 if rng.random() < 0.25 else 1
    shape = (rng.choice((1, 5, 32, 33, 64, 100)),) if dims == 1 else (
        rng.randint(1, 6), rng.choice((1, 3, 16, 17)))
    g, body = gen_simt.generate(rng, opts, dims)
    # drawn after the kernel's own draws: where none is picked, the seed's kernel is the one it
    # gave before grid-stride loops and the newer math were added
    gen_simt.newer_math(g, body, rng)
    stride = rng.choice(STRIDE_LAUNCHES) if dims == 1 and rng.random() < STRIDE_SHARE else None
    return SimtProgram(seed, f"k{seed}", dims, shape, g, body, opts.relax, stride)
