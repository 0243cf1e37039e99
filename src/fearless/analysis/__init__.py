"""Analyses the passes share, each a library with no pass of its own.

    linear      indices as linear forms over atoms, and the facts the guards around an access
                give (``Facts``; ``passes/inbounds.py`` proves reads in bounds with them)
    owners      which threads reach which elements: exhaustive enumeration over the contract's
                block (``passes/disjoint.py``, ``passes/shared.py``)
    strided     grid-stride and block-stride loops, and the thread index spelled out: each
                thread's elements are a residue class of its own, for any block
                (``passes/disjoint.py``, ``passes/inbounds.py``)
    uniformity  the values that may differ between the threads of a block or the lanes of a
                warp (``passes/barriers.py``, ``passes/warps.py``, ``passes/shared.py``)
"""
