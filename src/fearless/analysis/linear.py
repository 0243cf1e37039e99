"""Indices as linear forms over atoms, and the facts that the guards around an access give.

A value of i64 index arithmetic is a linear form ``(constant, ((atom, coefficient), ...))`` whose
atoms are thread and block coordinates, extents, loop counters, local variables (by version)
and products. ``Facts`` walks a function once and records, at each access of user or shared
memory, the facts ``(form, bound)`` meaning ``form < bound`` that hold there: from the
conditions that guard it (``if i < len(out)``, ``a and b`` through its bool local, ``while j <
n``), from ``min``/``max`` clamps, from loop ranges and from the dtype of a cast (a u8 is <
256). A form is ``>= 0`` when its constant and every coefficient are, over non-negative atoms.
Index arithmetic is 64-bit and indices are far below 2^62, so sums of non-negative terms do not
wrap; smaller integer types are not reasoned about.

Users: ``passes/inbounds.py`` (reads and writes proved in bounds), ``analysis/owners.py`` and
the ``disjoint`` and ``shared`` passes (through ``guard_facts``).
"""
from __future__ import annotations

import math

from fearless.analysis.common import params_by_value
from fearless.ir.core import Function
from fearless.ir.opdef import Op
from fearless.ir.ops.arith import ARITH
from fearless.ir.types import Access, Scalar, ThreadIndex

_UNSIGNED_MAX = {"u8": 255, "u16": 65535, "bool": 1}
_ACCESSES = (Op.MEM_LOAD, Op.MEM_STORE, Op.MEM_ATOMIC, Op.WARP_LDMATRIX, Op.MEM_ASYNC_COPY)


def guard_facts(fn: Function) -> "Facts":
    """``Facts`` of ``fn`` after its walk: ``at[id(op)]`` holds, for each load and store of a
    shared or Disjoint array, the guard facts true there and the version of every local at that
    point (a load whose key names another version read an older value)."""
    facts = Facts(fn)
    facts.region(fn.body, frozenset())
    return facts


def is_i64(value) -> bool:
    return isinstance(value.type, ThreadIndex) or (
        isinstance(value.type, Scalar) and value.type.dtype.name == "i64")


class Facts:
    """The walk of one function that records, at each access, the facts its guards give and
    the version of every local; ``key``/``linear`` name values and give their linear forms,
    ``nonneg``/``upper`` bound them, ``at_least`` compares forms. Subclasses act at each
    access of user or shared memory (``access``), as ``passes/inbounds.py`` does to prove it."""

    def __init__(self, fn: Function, block=None):
        self.params = params_by_value(fn)
        self.at = {}                  # id(shared/disjoint access) -> (facts, {ref id: version})
        self.block = block            # the contract's exact block (x, y) or None
        self.defs = {}                # id(value) -> defining op
        self.region_args = {}         # id(value) -> the scf.for op whose counter it is
        self.stores = {}              # id(local ref) -> values stored to it
        for op in fn.walk():
            for r in op.results:
                self.defs[id(r)] = op
            if op.name == Op.SCF_FOR:
                self.region_args[id(op.regions[0].args[0])] = op
            if op.name == Op.LOCAL_STORE:
                self.stores.setdefault(id(op.operands[0]), []).append(op.operands[1])
        self.version = {}             # id(local ref) -> current version number
        self.load_version = {}        # id(local.load result) -> (ref id, version)
        self.bool_facts = {}          # (ref id, version) -> facts when that bool is true
        self.stored_at = {}           # (ref id, version) -> the value that store wrote
        self.fresh = 0
        self.nonneg_locals = self._nonneg_locals()
        self._nonneg_keys = set()
        self._visiting = set()

    # walking, with versions of locals and facts from guards ----------------------------------

    def _bump(self, ref_id):
        self.fresh += 1
        self.version[ref_id] = self.fresh

    def _stored_in(self, regions):
        return {id(op.operands[0]) for r in regions for top in r.ops for op in _walk(top)
                if op.name == Op.LOCAL_STORE}

    def region(self, region, facts: frozenset) -> None:
        for op in region.ops:
            name = op.name
            if name in (Op.MEM_LOAD, Op.MEM_STORE) and \
                    op.operands[0].type.access in (Access.SHARED, Access.DISJOINT):
                self.at[id(op)] = (facts, dict(self.version))
            if name == Op.LOCAL_LOAD:
                ref = id(op.operands[0])
                self.load_version[id(op.result)] = (ref, self.version.get(ref, 0))
            elif name == Op.LOCAL_STORE:
                ref = id(op.operands[0])
                self._bump(ref)
                self.stored_at[(ref, self.version[ref])] = op.operands[1]
                if op.operands[1].type == op.operands[0].type.elem and \
                        getattr(op.operands[1].type, "dtype", None) is not None and \
                        op.operands[1].type.dtype.name == "bool":
                    self.bool_facts[(ref, self.version[ref])] = self.facts_true(op.operands[1])
            elif name in _ACCESSES:
                self.access(op, facts)
            elif name == Op.SCF_IF:
                self._if(op, facts)
            elif name in (Op.SCF_FOR, Op.SCF_WHILE):
                for ref in self._stored_in(op.regions):
                    self._bump(ref)  # the back edge: values stored in the loop come round
                if name == Op.SCF_FOR:
                    self.region(op.regions[0], facts)
                else:
                    cond, body = op.regions
                    self.region(cond, facts)
                    self.region(body, facts | self.facts_true(cond.ops[-1].operands[0]))
                for ref in self._stored_in(op.regions):
                    self._bump(ref)
            else:
                for r in op.regions:  # scf.inline and anything else with regions
                    self.region(r, facts)

    def access(self, op, facts: frozenset) -> None:
        """At a load, store, atomic, ldmatrix or async copy, with the facts true there."""

    def _if(self, op, facts) -> None:
        cond = op.operands[0]
        before = dict(self.version)
        self.region(op.regions[0], facts | self.facts_true(cond))
        after_then = dict(self.version)
        self.version = dict(before)
        self.region(op.regions[1], facts)
        after_else = self.version
        self.version = dict(after_else)
        for ref in self._stored_in(op.regions):
            self._bump(ref)
            v_then, v_else = after_then.get(ref, 0), after_else.get(ref, 0)
            then_facts = self.bool_facts.get((ref, v_then), frozenset()) | self.facts_true(cond)
            # `a and b`: `if L: L = b`; when L is still the condition, L is false after else
            if self.load_version.get(id(cond)) == (ref, v_else):
                merged = then_facts
            else:
                merged = then_facts & self.bool_facts.get((ref, v_else), frozenset())
            self.bool_facts[(ref, self.version[ref])] = merged

    def facts_true(self, value) -> frozenset:
        """Facts ``(linear form, bound key)`` meaning form < bound, when ``value`` is true."""
        op = self.defs.get(id(value))
        if op is None:
            return frozenset()
        if op.name == Op.CMP and all(is_i64(v) for v in op.operands):
            a, b = op.operands
            pred = op.attrs["pred"]
            if pred in ("lt", "gt"):
                small, big = (a, b) if pred == "lt" else (b, a)
                return frozenset({(self.linear(small), self.key(big))})
            if pred in ("le", "ge"):  # small <= big: small - 1 < big
                small, big = (a, b) if pred == "le" else (b, a)
                return frozenset({self._at_most(small, big)})
            if pred == "eq":  # both a <= b and b <= a
                return frozenset({self._at_most(a, b), self._at_most(b, a)})
            return frozenset()
        if op.name == Op.AND:
            return self.facts_true(op.operands[0]) | self.facts_true(op.operands[1])
        if op.name == Op.LOCAL_LOAD:
            return self.bool_facts.get(self.load_version.get(id(value)), frozenset())
        return frozenset()

    def _at_most(self, small, big):
        """The fact for ``small <= big``: ``small - 1 < big``."""
        const, terms = self.linear(small)
        return (const - 1, terms), self.key(big)

    # value numbering and linear forms --------------------------------------------------------

    def key(self, value):
        """A structural key: two values with one key are equal wherever both are defined."""
        op = self.defs.get(id(value))
        if op is None:
            arr = self.params.get(id(value))
            return ("param", arr.name) if arr is not None else ("value", id(value))
        if op.name == Op.MEM_DIM:
            return ("dim", self._array_key(op.operands[0]), op.attrs["axis"])
        if op.name in (Op.SIMT_THREAD_INDEX, Op.SIMT_SPECIAL):
            return (op.name, tuple(sorted(op.attrs.items())))
        if op.name == Op.SIMT_INDEX_VALUE:
            return ("index", self.key(op.operands[0]))
        if op.name == Op.CONSTANT:
            return ("const", op.attrs["value"])
        if op.name == Op.LOCAL_LOAD:
            return ("local", self.load_version.get(id(value)))
        if op.name in ARITH and op.name != Op.CMP:
            return (op.name, tuple(self.key(v) for v in op.operands),
                    getattr(value.type, "dtype", None) and value.type.dtype.name)
        return ("value", id(value))

    def _array_key(self, arr):
        p = self.params.get(id(arr))
        return ("param", p.name) if p is not None else ("shared", id(arr))

    def linear(self, value) -> tuple:
        """``value`` as (constant, ((atom key, coefficient), ...)), sorted."""
        const, terms = self._linear(value)
        return const, tuple(sorted(((k, c) for k, c in terms.items() if c), key=repr))

    def _linear(self, value):
        op = self.defs.get(id(value))
        if op is not None and is_i64(value):
            if op.name == Op.CONSTANT:
                return int(op.attrs["value"]), {}
            if op.name == Op.SIMT_INDEX_VALUE:
                return 0, {self.key(value): 1}
            if op.name in (Op.ADD, Op.SUB):
                (ca, ta), (cb, tb) = self._linear(op.operands[0]), self._linear(op.operands[1])
                sign = 1 if op.name == Op.ADD else -1
                terms = dict(ta)
                for k, c in tb.items():
                    terms[k] = terms.get(k, 0) + sign * c
                return ca + sign * cb, terms
            if op.name == Op.MUL:
                (ca, ta), (cb, tb) = self._linear(op.operands[0]), self._linear(op.operands[1])
                if not ta:
                    return ca * cb, {k: ca * c for k, c in tb.items()}
                if not tb:
                    return ca * cb, {k: cb * c for k, c in ta.items()}
        return 0, {self.key(value): 1}

    def resolved(self, value) -> tuple:
        """``linear(value)`` with ``index_value(t)`` read as ``t`` and each local replaced by the
        linear form of the value its one reaching store wrote (a ``for`` counter and ``j = ...``
        reach an index through locals): (constant, ((atom key, coefficient), ...)), sorted."""
        return self._resolve(self.linear(value), 0)

    def _resolve(self, form, depth: int):
        const, out = form[0], {}
        for atom, coef in form[1]:
            while atom[0] == "index":
                atom = atom[1]
            stored = self.stored_at.get(atom[1]) if atom[0] == "local" and atom[1] else None
            sub = self._resolve(self.linear(stored), depth + 1) if stored is not None and \
                depth < 16 else (0, ((atom, 1),))
            const += coef * sub[0]
            for a, k in sub[1]:
                out[a] = out.get(a, 0) + coef * k
        return const, tuple(sorted(((a, k) for a, k in out.items() if k), key=repr))

    # non-negativity and constant upper bounds ------------------------------------------------

    def _nonneg_locals(self) -> set:
        """i64 locals every store to which is non-negative (largest such set: start from all)."""
        refs = {r for r, vals in self.stores.items() if all(is_i64(v) for v in vals)}
        self._assumed = refs
        while True:
            keep = {r for r in refs if all(self.nonneg(v) == frozenset()
                                           for v in self.stores[r])}
            if keep == refs:
                return refs
            refs = self._assumed = keep

    def nonneg(self, value):
        """Preconditions under which ``value >= 0`` (empty: always), or None."""
        op = self.defs.get(id(value))
        if op is None:
            loop = self.region_args.get(id(value))
            if loop is not None and loop.attrs.get("step_sign", 0) > 0:
                return self.nonneg(loop.operands[0])
            return None
        name = op.name
        if name in (Op.SIMT_INDEX_VALUE, Op.SIMT_THREAD_INDEX, Op.SIMT_SPECIAL, Op.MEM_DIM):
            return frozenset()
        if name == Op.CONSTANT:
            return frozenset() if op.attrs["value"] >= 0 else None
        if name == Op.CAST:
            src = op.operands[0].type
            dt = getattr(src, "dtype", None)
            return frozenset() if dt is not None and dt.name.startswith(("u", "bool")) else None
        if name == Op.LOCAL_LOAD:
            ref = id(op.operands[0])
            return frozenset() if ref in getattr(self, "_assumed", set()) else None
        if name in (Op.ADD, Op.MUL, Op.MIN):
            parts = [self.nonneg(v) for v in op.operands]
            return None if None in parts else parts[0] | parts[1]
        if name == Op.MAX:
            parts = [self.nonneg(v) for v in op.operands]
            ok = [p for p in parts if p is not None]
            return min(ok, key=len) if ok else None
        if name == Op.SUB:  # extent - c, with extent >= c checked on the host
            a, b = op.operands
            da, db = self.defs.get(id(a)), self.defs.get(id(b))
            if da is not None and db is not None and da.name == Op.MEM_DIM and \
                    db.name == Op.CONSTANT and self._array_key(da.operands[0])[0] == "param":
                arr = self.params[id(da.operands[0])].name
                return frozenset({(arr, da.attrs["axis"], None, int(db.attrs["value"]))})
        return None

    def upper(self, value):
        """A constant c with value <= c, or None."""
        op = self.defs.get(id(value))
        if op is None:
            loop = self.region_args.get(id(value))
            if loop is not None and loop.attrs.get("step_sign", 0) > 0:
                hi = self.defs.get(id(loop.operands[1]))
                if hi is not None and hi.name == Op.CONSTANT:
                    return int(hi.attrs["value"]) - 1
            return None
        if op.name == Op.CONSTANT:
            return int(op.attrs["value"])
        if op.name == Op.LOCAL_LOAD:  # a local holding only bounded values (a loop counter)
            ref = id(op.operands[0])
            if ref in self._visiting or ref not in self.nonneg_locals:
                return None
            self._visiting.add(ref)
            ups = [self.upper(v) for v in self.stores.get(ref, ())]
            self._visiting.discard(ref)
            return max(ups) if ups and None not in ups else None
        if op.name == Op.CAST:
            dt = getattr(op.operands[0].type, "dtype", None)
            return _UNSIGNED_MAX.get(dt.name) if dt is not None else None
        if op.name == Op.SIMT_INDEX_VALUE:
            return self.upper(op.operands[0])
        if op.name in (Op.SIMT_THREAD_INDEX, Op.SIMT_SPECIAL):
            return self._coordinate_upper(op.name, op.attrs)
        if op.name == Op.ADD:
            a, b = (self.upper(v) for v in op.operands)
            return None if a is None or b is None else a + b
        if op.name == Op.MUL:
            if any(self.nonneg(v) != frozenset() for v in op.operands):
                return None
            a, b = (self.upper(v) for v in op.operands)
            return None if a is None or b is None else a * b
        if op.name == Op.MIN:
            ok = [u for u in (self.upper(v) for v in op.operands) if u is not None]
            return min(ok) if ok else None
        return None

    def at_least(self, form, other, nonneg_keys=frozenset()) -> bool:
        """Whether linear form ``form`` >= ``other`` always: their difference has a non-negative
        constant and coefficients over atoms known non-negative (``nonneg_keys`` too)."""
        self._nonneg_keys = set(nonneg_keys)
        return self._form_nonneg(difference(form, other))

    def _form_nonneg(self, form) -> bool:
        """Whether ``form`` >= 0: positive coefficients over non-negative atoms, and negative
        ones over atoms with a constant upper bound (the block's thread coordinates), paid for
        by the constant: ``31 - ty - 4 * k >= 0`` for ``ty < 4`` and ``k <= 7``."""
        const, terms = form
        for k, c in terms:
            if not self._atom_nonneg(k):
                return False
            if c < 0:
                up = self._atom_upper(k)
                if up is None:
                    return False
                const += c * up
        return const >= 0

    def _atom_upper(self, key):
        """``upper`` of an atom, by its key (the block's coordinates only), or None."""
        if key[0] == "index":
            key = key[1]
        if key[0] in (Op.SIMT_THREAD_INDEX, Op.SIMT_SPECIAL):
            return self._coordinate_upper(key[0], dict(key[1]))
        return None

    def _coordinate_upper(self, name: str, attrs) -> int | None:
        """The largest value of a thread coordinate: its position in the contract's exact
        block (the linear slot up to the block's threads - 1, ``thread_in_block``), the lane
        (31) or the warp."""
        if name == Op.SIMT_SPECIAL:
            if attrs.get("reg") == "lane":
                return 31
            if attrs.get("reg") == "thread_in_block" and self.block:
                return self.block[attrs["axis"]] - 1 if attrs["axis"] < len(self.block) else 0
            if attrs.get("reg") == "warp_index" and self.block:
                return (math.prod(self.block) - 1) // 32
            return None
        if not attrs.get("block") or not self.block:
            return None
        if attrs["space"] == 1:
            return math.prod(self.block) - 1
        along = 0 if attrs["axis"] == 1 else 1  # block is (x, y); 2-d axis 0 is y
        return self.block[along] - 1 if along < len(self.block) else 0

    def _atom_nonneg(self, key) -> bool:
        kind = key[0]
        if kind in ("index", Op.SIMT_THREAD_INDEX, Op.SIMT_SPECIAL, "dim"):
            return True
        if kind == "local":
            ref = key[1][0] if key[1] else None
            return ref in self.nonneg_locals
        return key in self._nonneg_keys

    def nonneg_atoms(self, value) -> frozenset:
        """Keys of the atoms of ``value``'s linear form known non-negative (for ``at_least``)."""
        return frozenset(self._collect_nonneg_atoms(value))

    def _collect_nonneg_atoms(self, value) -> set:
        """Keys of atoms of ``value``'s linear form proven non-negative without preconditions."""
        out, todo = set(), [value]
        while todo:
            v = todo.pop()
            op = self.defs.get(id(v))
            if op is not None and op.name in (Op.ADD, Op.SUB, Op.MUL):
                todo.extend(op.operands)
            elif self.nonneg(v) == frozenset():
                out.add(self.key(v))
        return out


def special(atom):
    """``(register, axis)`` of a ``simt.special`` atom (``block_index``, ``thread_in_block``,
    ...), else None."""
    if atom[0] == Op.SIMT_SPECIAL:
        attrs = dict(atom[1])
        return attrs["reg"], attrs["axis"]
    return None


def launch_product(atom):
    """For the product of two launch registers along one axis (``block_index(0) *
    block_dim(0)``, ``grid_dim(1) * block_dim(1)``): ``(the two names sorted, axis)``, else
    None."""
    if atom[0] != Op.MUL or len(atom[1]) != 2:
        return None
    parts = [special(a) for a in atom[1]]
    if None in parts or parts[0][1] != parts[1][1]:
        return None
    return tuple(sorted(r for r, _ in parts)), parts[0][1]


def difference(a, b):
    """The linear form a - b."""
    terms = dict(a[1])
    for k, c in b[1]:
        terms[k] = terms.get(k, 0) - c
    return a[0] - b[0], tuple((k, c) for k, c in terms.items() if c)


def _walk(op):
    yield op
    for r in op.regions:
        for inner in r.ops:
            yield from _walk(inner)
