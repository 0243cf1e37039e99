"""Tile IR backend: tile kernels -> CUDA Tile IR bytecode -> ``tileiras`` -> cubin.

Modules: ``tir`` (typed model: types, enums, Module/Function/Op), ``builder`` (one method per
op), ``ops`` (opcode, version and payload layout per op), ``writer`` / ``reader`` (bytecode),
``bytecode`` (varints, tables, sections), ``tileiras`` (the external compiler; the only module
that runs subprocesses). The names below are the public surface for the lowering.
"""
from fearless.backends.tileir.builder import Builder
from fearless.backends.tileir.ops import SUPPORTED_VERSIONS
from fearless.backends.tileir.reader import decode
from fearless.backends.tileir.tir import (
    BF16,
    F16,
    F32,
    F64,
    I1,
    I8,
    I16,
    I32,
    I64,
    TF32,
    TOKEN,
    Bounded,
    CmpPred,
    DivBy,
    MemOrder,
    MemScope,
    Module,
    Ordering,
    Overflow,
    Rounding,
    SameElements,
    Scalar,
    Signedness,
    Value,
    dump,
    partition_view,
    ptr,
    tensor_view,
    tile,
)

__all__ = [
    "BF16", "F16", "F32", "F64", "I1", "I8", "I16", "I32", "I64", "SUPPORTED_VERSIONS", "TF32",
    "TOKEN", "Bounded", "Builder", "CmpPred", "DivBy", "MemOrder", "MemScope", "Module",
    "Ordering", "Overflow", "Rounding", "SameElements", "Scalar", "Signedness", "Value",
    "decode", "dump", "partition_view", "ptr", "tensor_view", "tile",
]
