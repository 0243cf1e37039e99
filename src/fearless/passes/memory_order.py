"""Memory order of a tile kernel: which loads and stores must stay in program order.

A tile block that stores a tile and reads it back, or stores it twice, must see its own writes in
program order. The CPU backend runs a block's ops in order; Tile IR leaves two memory operations
unordered unless a token connects them (the Tile IR spec's memory operations section), so this
pass says which operations the Tile IR lowering (``backends/tileir/lower.py``) must connect, and
after what; the lowering builds the tokens from these facts and decides nothing itself.

Alias sets: the launcher refuses an Out or Atomic tensor that overlaps itself or any other
argument (``runtime/launch.check_arguments``), and In tensors are never written (the verifier
refuses a store or scatter to one), so each written tensor is its own alias set and two
accesses conflict only when they reach the same tensor and one of them writes. The writes are
``WRITES``: stores, scatters and atomics (an atomic reads and writes). Every access of a tensor
that the kernel writes gets attr ``order``:

* ``Order.AFTER_STORES`` on a read (a load or gather): it follows the last write to its tensor
  (read after write);
* ``Order.AFTER_ALL`` on a write: it follows every earlier access of its tensor (write after
  read, write after write; an atomic also sees the earlier atomics of this block).

"Earlier" is in program order, through ``if`` branches and loop iterations (the lowering carries
the tokens through them). Reads of In tensors, and of an Out that the kernel never writes, get
no ``order``: nothing they could conflict with, so they stay free to move. Between tile blocks
nothing is ordered: they write only their own tiles, and atomics are atomic.
"""
from __future__ import annotations

from enum import Enum

from fearless.ir.core import Function
from fearless.ir.opdef import Op

WRITES = (Op.TILE_STORE, Op.TILE_SCATTER, Op.TILE_ATOMIC, Op.TILE_ATOMIC_CAS)
MEMORY = (Op.TILE_LOAD, Op.TILE_LOAD_OWN, Op.TILE_GATHER) + WRITES


class Order(Enum):
    """Which earlier accesses of its tensor a load or store must follow."""

    AFTER_STORES = "after_stores"  # a read: the last write before it
    AFTER_ALL = "after_all"        # a write: every access before it

    def __repr__(self) -> str:  # as the IR printer shows the attribute
        return self.value


def run(fn: Function, options) -> Function:
    accesses = [op for op in fn.walk() if op.name in MEMORY]
    written = {id(op.operands[0]) for op in accesses if op.name in WRITES}
    for op in accesses:
        if id(op.operands[0]) not in written:
            op.attrs.pop("order", None)
        else:
            op.attrs["order"] = Order.AFTER_ALL if op.name in WRITES else Order.AFTER_STORES
    return fn
