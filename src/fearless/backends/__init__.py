"""Backends: LLVM (SIMT IR -> LLVM IR -> PTX) and CPU (the IR interpreted with NumPy)."""
