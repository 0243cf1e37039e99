"""Shared-memory discipline: own-slot writes, and a barrier between threads' accesses.

Proved here, for every shared array (``fl.shared.array`` / ``fl.shared.dynamic``):
1. a write goes to the thread's own slot: the index is ``fl.thread.index_in_block()`` itself (or
   ``(ty, tx)`` of ``index_in_block_2d()`` for a 2-d array), so no two threads of a block
   write one element; or, with the contract's exact block, the array's writes at computed
   slots (``tile[ty + 8 * k, tx]``, swizzles) reach no slot from two threads, checked by
   enumerating the block's threads (``analysis/owners.py``); such a write counts as a write of
   any slot for the barrier rules below;
2. a read of any other slot (a computed index) is separated from every earlier write of the
   array by a barrier (read-after-write), and every later write is separated from that read by a
   barrier (write-after-read: the next loop iteration must not overwrite what a slower thread
   still reads), unless the slots are disjoint: a write at the own slot ``t`` under a guard
   ``t < E`` (``E`` the same for every thread: constants, extents, scalar parameters, block
   coordinates, locals assigned alike in all threads, and arithmetic on them) and a read at an
   index ``r`` of a 1-d array with ``r - E >= 0`` (the linear forms and guard facts of
   ``passes/inbounds.py``) touch different slots, since every slot written is below ``E``: the
   tree reduction's ``if t < stride: s[t] += s[t + stride]``. ``E`` must name the same value at
   both accesses, so a store to a local that ``E`` or ``r`` reads, between the two, drops the
   proof;
3. atomic methods on a shared array are separated from plain accesses by a barrier;
4. async copies (``fl.async_copy``) go to the thread's own chunk (the last index is
   ``index_in_block()``), into arrays nothing else writes; their data is read (by anyone,
   ``fl.mma.ldmatrix`` included) only after an ``fl.async_wait(n)`` that completes their group
   (its group is older than the n latest committed), and by other threads
   only after a barrier that follows the wait. Groups are counted per array, along every path:
   the state keeps, per array with copies in flight, the fewest ``fl.async_commit()`` calls since
   its latest copy.
The barriers themselves are reached by the whole block (``passes/barriers.py``). The analysis
follows structured control flow: a branch joins both sides, a loop runs to a fixpoint over its
back edge. Accesses inside ``with fl.unsafe():`` are not refused (the cpu race detector checks
them at run time) but still count as writes and reads for the accesses after them.

Sets ``fn.attrs["shared"]``: ``(name, shape or None for dynamic, dtype name)`` per allocation.
"""
from __future__ import annotations

from fearless.analysis import owners
from fearless.analysis.linear import guard_facts
from fearless.analysis.uniformity import varying
from fearless.errors import CompileError, SafetyError
from fearless.ir.core import Function, Operation, Region
from fearless.ir.opdef import Op
from fearless.ir.ops.arith import ARITH
from fearless.ir.types import Access, Scalar, ThreadIndex

_WRITES, _READS, _ATOMICS, _INFLIGHT = 0, 1, 2, 3
_MAX_AGE = 8  # wait_group takes 0..7: an older group is complete after any wait
EMPTY = ({}, {}, {}, {})
# The state, per array id: _WRITES and _READS {record: None} (ordered sets), _ATOMICS the span
# of the first atomic, _INFLIGHT (commits since the latest copy, its span). A write record is
# (span, bounds): the keys E of guards `t < E` of an own-slot write (empty: any slot may be
# written); a read record is (span, form, non-negative atom keys): the linear form of the index
# (None: any slot may be read).
_UNIFORM_SPECIAL = {"block_index", "block_dim", "grid_dim"}


def own_slot(op: Operation, array) -> bool:
    """Whether the access ``op`` indexes ``array`` with the thread's own block slot."""
    ndim = array.type.ndim
    return all(v.type == ThreadIndex(ndim, k, True)
               for k, v in enumerate(op.operands[1:1 + ndim]))


def _join(a, b):
    if a is None:
        return b
    if b is None:
        return a
    merged = tuple({k: {**x.get(k, {}), **y.get(k, {})} for k in (*x, *y)}
                   for x, y in zip(a[:2], b[:2]))
    atomics = {**a[2], **{k: v for k, v in b[2].items() if k not in a[2]}}
    inflight = dict(a[3])
    for k, (age, span) in b[3].items():
        if k not in inflight or age < inflight[k][0]:
            inflight[k] = (age, span)
    return (*merged, atomics, inflight)


def _add(records: dict, key, record) -> None:
    records[key] = {**records.get(key, {}), record: None}


def _locals(key):
    """The (local slot id, version) pairs that a value key reads."""
    if isinstance(key, tuple):
        if len(key) == 2 and key[0] == "local":
            yield key[1]
        else:
            for part in key:
                yield from _locals(part)


class _Checker:
    def __init__(self, fn: Function, block):
        self.fn = fn
        self.guards = guard_facts(fn)
        # computed: arrays written at proved computed slots, where another thread may write a
        # thread's own slot t, so a read of s[t] is a read of another thread's slot
        self.owned, self.computed, self.unowned = self.prove_owners(fn, block)
        self.varying = varying(fn)
        self.async_targets = {id(op.operands[0]): op for op in fn.walk()
                              if op.name == Op.MEM_ASYNC_COPY}
        self.loops: list[list] = []   # per loop: [break states, continue states]

    def prove_owners(self, fn: Function, block):
        """(ids of stores proven to reach slots no other thread of the block writes, ids of
        their arrays, {array id: why not}) for arrays written at computed slots
        (``analysis/owners.py``)."""
        stores: dict[int, list] = {}
        for op in fn.walk():
            if op.name == Op.MEM_STORE and op.operands[0].type.access is Access.SHARED and \
                    not op.attrs.get("unsafe"):
                stores.setdefault(id(op.operands[0]), []).append(op)
        owned, computed, unowned = set(), set(), {}
        for key, ops in stores.items():
            if all(own_slot(op, op.operands[0]) for op in ops):
                continue
            try:
                owners.prove(self.guards, ops, block, shared=True)
                owned.update(id(op) for op in ops)
                computed.add(key)
            except owners.Unproven as why:
                if not isinstance(why, owners.NoBlock):
                    unowned[key] = str(why)
        return owned, computed, unowned

    def fail(self, op: Operation, array, reason: str, help: str):
        spans = op.attrs.get("index_spans")
        raise SafetyError(reason, kernel=self.fn.name, param=array.hint or None,
                          span=spans[0] if spans and op.name != Op.MEM_STORE else op.span,
                          help=help)

    def region(self, region: Region, state):
        for op in region.ops:
            if state is None:
                return None
            state = self.op(op, state)
        return state

    def op(self, op: Operation, state):
        name = op.name
        if name == Op.SCF_IF:
            return _join(self.region(op.regions[0], state), self.region(op.regions[1], state))
        if name in (Op.SCF_FOR, Op.SCF_WHILE):
            return self.loop(op, state)
        if name == Op.SCF_INLINE:
            self.loops.append(None)  # a return inside leaves the inline, not a loop
            try:
                return self.region(op.regions[0], state)
            finally:
                self.loops.pop()
        if name in (Op.CF_BREAK, Op.CF_CONTINUE):
            frame = next(f for f in reversed(self.loops) if f is not None)
            frame[name == Op.CF_CONTINUE].append(state)
            return None
        if name == Op.CF_RETURN:
            return None
        if name == Op.SIMT_BARRIER:  # orders plain accesses, not copies still in flight
            return ({}, {}, {}, state[_INFLIGHT])
        if name == Op.LOCAL_STORE:
            return self.kill(id(op.operands[0]), state)
        if name == Op.MEM_ASYNC_COMMIT:
            return (*state[:3], {k: (min(age + 1, _MAX_AGE), span)
                                 for k, (age, span) in state[_INFLIGHT].items()})
        if name == Op.MEM_ASYNC_WAIT:
            n = op.attrs["n"]
            writes = dict(state[_WRITES])
            inflight = {}
            for k, (age, span) in state[_INFLIGHT].items():
                if age > n:  # landed: visible to the copying thread, to others after a barrier
                    _add(writes, k, (span, frozenset()))
                else:
                    inflight[k] = (age, span)
            return (writes, state[_READS], state[_ATOMICS], inflight)
        if name in (Op.MEM_LOAD, Op.MEM_STORE, Op.MEM_ATOMIC, Op.WARP_LDMATRIX, Op.MEM_ASYNC_COPY):
            array = op.operands[0]
            if array.type.access is Access.SHARED:
                return self.access(op, array, state)
        return state

    def loop(self, op: Operation, state):
        before = state
        for _ in range(8):  # the sets only grow; three rounds settle in practice
            frame = [[], []]
            self.loops.append(frame)
            try:
                if op.name == Op.SCF_WHILE:
                    after_cond = self.region(op.regions[0], state)
                    end = self.region(op.regions[1], after_cond)
                else:
                    after_cond = state
                    end = self.region(op.regions[0], state)
            finally:
                self.loops.pop()
            for s in frame[1]:
                end = _join(end, s)
            new = _join(before, end)
            if new == state:
                break
            state = new
        out = _join(before, after_cond)
        for s in frame[0]:
            out = _join(out, s)
        return out

    def access(self, op: Operation, array, state):
        writes, reads, atomics, inflight = (dict(s) for s in state)
        key, unsafe = id(array), op.attrs.get("unsafe", False)
        name = array.hint or "shared memory"
        here = op.span
        if op.name == Op.MEM_ASYNC_COPY:
            return self.async_copy(op, array, (writes, reads, atomics, inflight))
        if key in inflight and not unsafe and op.name in (Op.MEM_LOAD, Op.WARP_LDMATRIX):
            line = inflight[key][1].line if inflight[key][1] else "?"
            self.fail(op, array, f"this reads '{name}', which the async copy on line {line} may "
                                 f"still be writing: no fl.async_wait() completes its group "
                                 f"before this point",
                      "call fl.async_wait(n) with n smaller than the number of "
                      "fl.async_commit() calls since the copy, then fl.sync_threads() before "
                      "other threads read it")
        if key in self.async_targets and op.name in (Op.MEM_STORE, Op.MEM_ATOMIC) and not unsafe:
            line = self.async_targets[key].span.line if self.async_targets[key].span else "?"
            self.fail(op, array, f"'{name}' is filled by the async copy on line {line}, so it "
                                 f"may not be written another way (the copies' chunks are not "
                                 f"the threads' own slots of this write)",
                      "use a separate shared array, or wrap the write in `with fl.unsafe():`")
        if op.name == Op.WARP_LDMATRIX:  # reads rows that other lanes name
            other = _first(writes.get(key)) or atomics.get(key)
            if other and not unsafe:
                self.fail(op, array, f"ldmatrix reads other threads' slots of '{name}', written "
                                     f"on line {other.line} with no barrier in between",
                          "call fl.sync_threads() after the writes (after "
                          "fl.async_wait() for async copies) and before this read")
            _add(reads, key, (here, None, frozenset()))
            return writes, reads, atomics, inflight
        if op.name == Op.MEM_ATOMIC:
            other = _first(writes.get(key)) or _first(reads.get(key))
            if other and not unsafe:
                self.fail(op, array, f"this atomic on '{name}' and the plain access on line "
                                     f"{other.line} may touch one element with no barrier in "
                                     f"between", "call fl.sync_threads() between them")
            atomics.setdefault(key, here)
            return writes, reads, atomics, inflight
        own = own_slot(op, array)
        if op.name == Op.MEM_STORE:
            if not own and not unsafe and id(op) not in self.owned:
                rmw = op.attrs.get("rmw")
                why = self.unowned.get(key)
                self.fail(op, array,
                          f"a thread may write '{name}' only at its own slot, and this index "
                          f"is a computed integer" + (" (several threads may update one "
                                                      "element)" if rmw else "")
                          + (f", and the compiler cannot prove that threads write distinct "
                             f"slots: {why}" if why and not rmw else ""),
                          "use an atomic method such as "
                          f"{name}.add(i, v) to update shared elements from several threads"
                          if rmw else
                          "index with fl.thread.index_in_block() itself (index_in_block_2d() "
                          "for a 2-d array), or wrap the write in `with fl.unsafe():`")
            write = (here, self.bounds(op) if own else frozenset())
            other = next((r[0] for r in reads.get(key, ()) if not self.disjoint(write, r)),
                         None) or atomics.get(key)
            if other and not unsafe:
                self.fail(op, array, f"this write to '{name}' may overwrite a slot that another "
                                     f"thread reads on line {other.line} with no barrier in "
                                     f"between", "call fl.sync_threads() after the reads "
                                                 "and before this write" + _DISJOINT_HELP)
            _add(writes, key, write)
            return writes, reads, atomics, inflight
        if own and key not in self.computed:
            return writes, reads, atomics, inflight
        read = self.read_record(op)
        other = next((w[0] for w in writes.get(key, ()) if not self.disjoint(w, read)),
                     None) or atomics.get(key)
        if other and not unsafe:
            self.fail(op, array, f"this reads another thread's slot of '{name}', written on "
                                 f"line {other.line} with no barrier in between",
                      "call fl.sync_threads() after the writes and before this read")
        _add(reads, key, read)
        return writes, reads, atomics, inflight

    def async_copy(self, op: Operation, array, state):
        writes, reads, atomics, inflight = state
        name = array.hint or "shared memory"
        if not op.attrs.get("unsafe"):
            slot = op.operands[array.type.ndim]
            if slot.type != ThreadIndex(1, 0, True):
                self.fail(op, array, f"an async copy into '{name}' goes to the thread's own "
                                     f"chunk, and this chunk index is a computed integer",
                          "make the last slot index fl.thread.index_in_block() itself (the "
                          "leading indices may be anything), or wrap the copy in "
                          "`with fl.unsafe():`")
            other = _first(reads.get(id(array))) or atomics.get(id(array))
            if other:
                self.fail(op, array, f"this async copy into '{name}' may overwrite a slot that "
                                     f"another thread reads on line {other.line} with no "
                                     f"barrier in between",
                          "call fl.sync_threads() after the reads and before this copy")
        inflight[id(array)] = (0, op.span)
        return writes, reads, atomics, inflight

    # disjoint slots within one barrier interval ------------------------------------------------

    def bounds(self, op: Operation) -> frozenset:
        """The keys E of guards ``t < E`` of the own-slot write ``op`` (t its slot), E the same
        in every thread and naming the locals' current values; empty for a 2-d array."""
        if op.operands[0].type.ndim != 1:
            return frozenset()
        facts, version = self.guards.at.get(id(op), (frozenset(), {}))
        slot = (0, ((("index", self.guards.key(op.operands[1])), 1),))
        return frozenset(bound for small, bound in facts
                         if self.uniform(bound, version) and self.guards.at_least(small, slot))

    def uniform(self, key, version) -> bool:
        """Whether value key ``key`` is equal in every thread of the block and reads only the
        current values of locals (``version``: each local's version at the access)."""
        kind = key[0]
        if kind in ("const", "dim", "param"):
            return True
        if kind == Op.SIMT_SPECIAL:
            return dict(key[1]).get("reg") in _UNIFORM_SPECIAL
        if kind == "local":
            return key[1] is not None and key[1][0] not in self.varying and \
                version.get(key[1][0], 0) == key[1][1]
        if kind in ARITH:
            return all(self.uniform(k, version) for k in key[1])
        return False

    def read_record(self, op: Operation) -> tuple:
        """A read record for ``op``: its index's linear form when the array is 1-d and the form
        reads only the locals' current values, else None (any slot)."""
        idx = op.operands[1]
        if op.operands[0].type.ndim != 1 or not isinstance(idx.type, Scalar) or \
                idx.type.dtype.name != "i64":
            return (op.span, None, frozenset())
        _, version = self.guards.at.get(id(op), (frozenset(), {}))
        form = self.guards.linear(idx)
        if any(v is None or version.get(v[0], 0) != v[1] for v in _locals(form)):
            return (op.span, None, frozenset())
        return (op.span, form, self.guards.nonneg_atoms(idx))

    def disjoint(self, write, read) -> bool:
        """Whether no slot the write record may touch in another thread is one the read
        record may touch: some bound E of the write (slots below E) has read index >= E."""
        _, bounds = write
        _, form, nonneg = read
        return form is not None and any(
            self.guards.at_least(form, (b[1], ()) if b[0] == "const" else (0, ((b, 1),)),
                                 nonneg)
            for b in bounds)

    def kill(self, ref: int, state):
        """A store to local slot ``ref``: records whose bounds or index read it lose them."""
        def reads_ref(key):
            return any(v is None or v[0] == ref for v in _locals(key))
        writes = {k: {(span, frozenset(b for b in bounds if not reads_ref(b))): None
                      for span, bounds in recs}
                  for k, recs in state[_WRITES].items()}
        reads = {k: {(r if r[1] is None or not reads_ref(r[1]) else (r[0], None, frozenset()))
                     : None for r in recs}
                 for k, recs in state[_READS].items()}
        return (writes, reads, *state[2:])


_DISJOINT_HELP = ("; or, within one barrier interval, guard the write of the own slot t with "
                  "`if t < n:` (n the same in every thread) and read only slots at or above n, "
                  "such as t + n")


def _first(records):
    return next(iter(records))[0] if records else None


def run(fn: Function, options) -> Function:
    allocs = [op for op in fn.walk() if op.name == Op.SIMT_SHARED_ALLOC]
    dynamic = [op for op in allocs if op.attrs["shape"] is None]
    if len(dynamic) > 1:
        raise CompileError("the kernel asks for dynamic shared memory twice; both would be the "
                           "same memory", kernel=fn.name, span=dynamic[1].span,
                           help="call fl.shared.dynamic(dtype) once and share the array")
    fn.attrs["shared"] = tuple((op.result.hint or f"shared{k}", op.attrs["shape"],
                                op.result.type.dtype.name) for k, op in enumerate(allocs))
    if allocs:
        _Checker(fn, getattr(options, "block", None)).region(fn.body, EMPTY)
    return fn
