"""Memory order of a tile kernel: which loads and stores must stay in program order.

A tile block that stores a tile and reads it back, or stores it twice, must see its own writes in
program order. The CPU backend runs a block's ops in order; Tile IR leaves two memory operations
unordered unless a token connects them (the Tile IR spec's memory operations section), so this
pass says which operations the Tile IR lowering (``backends/tileir/lower.py``) must connect, and
after what; the lowering builds the tokens from these facts and decides nothing itself.

Alias sets: the launcher refuses an Out that overlaps itself or any other argument
(``runtime/launch.check_arguments``), and In tensors are never written (the verifier refuses a
``tile.store`` to one), so each Out tensor is its own alias set and two accesses conflict only
when they reach the same Out tensor and one of them is a store. Every load and store of an Out
tensor that the kernel stores gets attr ``order``:

* ``Order.AFTER_STORES`` on a load: it follows the last store to its tensor (read after write);
* ``Order.AFTER_ALL`` on a store: it follows every earlier load and store of its tensor (write
  after read, write after write).

"Earlier" is in program order, through ``if`` branches and loop iterations (the lowering carries
the tokens through them). Loads of In tensors, and of an Out that the kernel never stores, get
no ``order``: nothing they could conflict with, so they stay free to move.
"""
from __future__ import annotations

from enum import Enum

from fearless.ir.core import Function
from fearless.ir.opdef import Op

MEMORY = (Op.TILE_LOAD, Op.TILE_LOAD_OWN, Op.TILE_STORE)


class Order(Enum):
    """Which earlier accesses of its tensor a load or store must follow."""

    AFTER_STORES = "after_stores"  # a load: the last store before it
    AFTER_ALL = "after_all"        # a store: every load and store before it

    def __repr__(self) -> str:  # as the IR printer shows the attribute
        return self.value


def run(fn: Function, options) -> Function:
    accesses = [op for op in fn.walk() if op.name in MEMORY]
    stored = {id(op.operands[0]) for op in accesses if op.name == Op.TILE_STORE}
    for op in accesses:
        if id(op.operands[0]) not in stored:
            op.attrs.pop("order", None)
        else:
            op.attrs["order"] = Order.AFTER_ALL if op.name == Op.TILE_STORE else \
                Order.AFTER_STORES
    return fn
