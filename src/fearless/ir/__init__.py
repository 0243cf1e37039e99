"""fearless IR: a small typed SSA IR with structured control flow.

Values are produced by operations or are region arguments; control flow is nested regions
(``scf.if``, ``scf.for``, ``scf.while``, ``scf.inline``) exited early by ``cf.break``,
``cf.continue`` and ``cf.return``. Mutable Python locals live in typed slots (``local.*`` ops),
which LLVM's mem2reg turns into registers and the CPU backend into per-lane arrays.
Every op is defined once in ``ir/ops/*`` (an OpDef in ``opdef.REGISTRY``).
"""
