"""``fearless tune TARGET --signature "a=f16[m,k],..." [--size m=4096,...] [--scalar n=3]
[--const causal=1]``:
tune ``ft.autotune`` kernels ahead of time, on the machine (its GPU) that will run them.

Each kernel is tuned (``tuning.Autotuned.tune``) for arguments the command line describes:
contiguous tensors of the shapes given (In tensors of a float dtype random normal, integer and
bool ones zero; Outs and Atomics zero) and the ``--scalar`` values. The ranking goes where the
kernel's calls look for it (``FEARLESS_CACHE_DIR/autotune/``), and its report is printed.
Shapes are written as ``fearless bench`` writes them: a bracketed shape in ``--signature``
(``a=f16[m,k]``) whose extents are expressions of the ``--size`` names, or plain extents
(``a=f16[4096,4096]``); ``--shape a=4096x4096`` is the older form of the same. Every tensor
parameter needs a shape and every scalar one a ``--scalar``; the dtype in ``--signature`` is
needed for a generic parameter only, as in ``fearless inspect``. ``--const`` gives the
``ft.Const`` parameters that no config sets (the caller's; their defaults otherwise).
"""
from __future__ import annotations

from fearless.targets import UsageError, check_names, evaluate, find_kernels, parse_consts, \
    parse_shapes, parse_signature, parse_sizes


def run(target: str, signature: str, shape: str, scalar: str, sizes: list[str] = (),
        const: str = "") -> int:
    """Tune each ft.autotune kernel of ``target``. Raises UsageError for the command line,
    AutotuneError where this machine does not tune (the cpu backend)."""
    exprs: dict = {}
    sig, shapes, scalars = parse_signature(signature, exprs), parse_shapes(shape), \
        parse_consts(scalar, "--scalar")
    consts = parse_consts(const, "--const")
    bound = parse_sizes(list(sizes))
    for name, extents in exprs.items():
        if name in shapes:
            raise UsageError(f"'{name}' has a shape in --signature and in --shape: give one")
        values = tuple(evaluate(e, bound, f"--signature {name}: the extent") for e in extents)
        if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
            raise UsageError(f"--signature {name}: the shape {values} is not positive integers")
        shapes[name] = values
    tuned = find_kernels(target, autotuned=True)
    for option, given in (("--signature", sig), ("--shape", shapes), ("--scalar", scalars)):
        check_names(tuned, given, option, False)
    check_names(tuned, consts, "--const", True)
    for t in tuned:
        report = t.tune(**_arguments(t, sig, shapes, scalars, consts))
        print(f"kernel '{t.name}': {report}")
    return 0


def _arguments(tuned, sig: dict, shapes: dict, scalars: dict, consts: dict) -> dict:
    """Arguments of ``tuned``'s runtime parameters as the command line describes them (see the
    module docstring). Raises UsageError for one left out or a rank that disagrees, or a
    constant that the configs set."""
    import numpy as np

    import fearless as fl
    from fearless.kernel import params as P
    runtime = [p for p in tuned.runtime if p.kind is not P.CONST]
    callers = {p.name for p in tuned.runtime if p.kind is P.CONST}
    for name in consts:
        if name not in callers:
            given = ", ".join(sorted(callers)) or "none"
            raise UsageError(f"--const {name}: the configs of '{tuned.name}' set it; give only "
                             f"the constants no config sets ({given})")
    given = {}
    for p in runtime:
        if p.kind is P.SCALAR:
            if p.name not in scalars:
                raise UsageError(f"give --scalar {p.name}=VALUE for kernel '{tuned.name}'")
            continue
        if p.name not in shapes:
            raise UsageError(f"give the shape of '{p.name}' for kernel '{tuned.name}': "
                             f"--signature {p.name}=[...] (such as {p.name}=[4096,4096])")
        dt, ndim, _ = sig.get(p.name, (None, None, None))
        rank = len(shapes[p.name])
        if ndim is not None and ndim != rank:
            raise UsageError(f"--signature gives '{p.name}' rank {ndim}, its shape rank {rank}")
        given[p.name] = (dt, rank, (1,) * rank if p.kind is P.OUT else None)
    try:
        infos = P.signature_infos(runtime, given)
    except P.Unspecified as exc:
        raise UsageError(str(exc)) from None
    rng, args = np.random.default_rng(0), {}
    for p in tuned.runtime:   # a command line spells a bool as 0 or 1
        if p.name in consts:
            v = consts[p.name]
            args[p.name] = bool(v) if p.dtype is bool and v in (0, 1) else v
    for p, info in zip(runtime, infos):
        if p.kind is P.SCALAR:
            args[p.name] = scalars[p.name]
        elif p.kind is P.IN and info.dtype.is_float:
            args[p.name] = fl.asarray(rng.standard_normal(shapes[p.name]).astype(
                info.dtype.numpy))
        else:
            args[p.name] = fl.zeros(shapes[p.name], info.dtype)
    return args
