"""Tile IR backend: tile kernels -> CUDA Tile IR bytecode -> ``tileiras`` -> cubin.

``tir`` (typed model), ``builder`` (one method per op), ``ops`` (opcode/layout table),
``writer`` / ``reader`` (bytecode), ``tileiras`` (the external compiler).
"""
