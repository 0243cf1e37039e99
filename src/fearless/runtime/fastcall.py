"""A repeat SIMT launch as one generated function: a LaunchPlan's steps for its argument types.

``LaunchPlan`` (``runtime/plan.py``) is generic: the launcher reads each argument through a
reader chosen by its type, builds the signature key, finds the plan, and the plan loops over its
parameters to admit and run the launch. On this machine's Python each of those steps costs a
fraction of a microsecond, and together they cost more than the driver's ``cuLaunchKernel``.
``build(plan, args)`` writes the same steps for one plan and the types of the arguments it was
made with as straight-line Python, compiled once per shape of code (as ``pack.py`` writes the
parameter packer):

* each argument's type is checked (``type(a) is T``); a fearless Tensor gives its cached view and
  its ownership state, a contiguous torch tensor is read through its attributes, a CuPy array
  (or a torch view that is not contiguous) through its reader (``runtime/args.py``), and the
  view's key must be the plan's; an argument only ``args.of_any`` reads gets no fast function;
* ``LaunchPlan.admits``'s checks, unrolled: no moved or claimed fearless tensor, no written
  argument that is read-only, overlaps itself or shares bytes with another argument, and the
  shapes the slow path last checked;
* ``LaunchPlan.run``'s common case on a stream that leases (not inside ``fl.capture()``,
  where the launcher records the launch): ``requires``, no pending write from another stream (else
  ``plan.run`` does the full ``check_order``), the writes recorded, scalars converted, an error
  word when the kernel has bounds sites, one parameter pack, one ``cuLaunchKernel``, the lease.

The function returns False, having done nothing, whenever an argument is not what the plan was
made for or a check would send the launch to the slow path; the launcher then takes its general
path, which reaches the same result and raises the errors with their messages.
"""
from __future__ import annotations

import sys

from fearless.errors import ArgumentTypeError
from fearless.runtime import device, dispatch, ownership, pack
from fearless.runtime import stream as streams
from fearless.runtime.args import FLAGS, HI, KEY, LO, SHAPE, _TORCH_DTYPES, _torch_dtypes, \
    of_any, of_tensor, reader
from fearless.runtime.stream import LEASE_BATCH
from fearless.runtime.tensor import Tensor

_CODE: dict = {}  # generated source -> its compiled factory


def build(plan, args, views):
    """The fast function of ``plan`` (a LaunchPlan) for arguments of the types of ``args``,
    whose launch ``views`` (``runtime/args.py``) a launch admitted by the plan read; None when
    an argument is wrapped in a fresh fearless Tensor per launch (``args.of_any``: DLPack and
    ``__cuda_array_interface__`` producers), whose ownership only the plan checks."""
    if any(k in plan.arrays and type(a) is not Tensor and reader(type(a), "cuda") is of_any
           for k, a in enumerate(args)):
        return None
    lines, consts = [], {}
    names = [f"a{k}" for k in range(len(args))]
    lines.append(f"    if len(args) != {len(args)} or _device._chosen != 'cuda' or "
                 "getattr(_olocal, 'executing', False):")
    lines.append("        return False")
    lines.append(f"    {', '.join(names)}, = args")
    arrays = set(plan.arrays)
    for k, arg in enumerate(args):
        kind = type(arg)
        consts[f"T{k}"] = kind
        if k not in arrays:
            lines.append(f"    if type(a{k}) is not T{k}:")
            lines.append("        return False")
            continue
        consts[f"K{k}"] = views[k][KEY]
        lines += _read(k, arg, kind, views[k], consts)
    lines += _admits(plan)
    lines += _run(plan, consts)
    body = "\n".join(lines)
    source = f"def make({', '.join(sorted(consts))}):\n    def fast(args):\n" + \
        "\n".join("    " + line for line in body.splitlines()) + "\n    return fast\n"
    factory = _CODE.get(source)
    if factory is None:
        scope = {"_device": device, "_olocal": ownership._local, "_slocal": streams._local,
                 "_follow": streams.follow, "_LEGACY": streams.LEGACY,
                 "_current": streams.unchosen_stream, "_pack": pack,
                 "_of_tensor": of_tensor,
                 "_words": dispatch.error_words, "_LEASES": LEASE_BATCH,
                 "_ArgumentTypeError": ArgumentTypeError}
        exec(compile(source, f"<fearless fast launch of {plan.kernel}>", "exec"), scope)
        factory = _CODE[source] = scope["make"]
    return factory(**{name: consts[name] for name in sorted(consts)})


def _read(k: int, arg, kind: type, view, consts: dict) -> list[str]:
    """Lines setting ``v{k}``, the launch view of array argument ``a{k}``."""
    if kind is Tensor:
        return [f"    if type(a{k}) is not T{k}:", "        return False",
                f"    v{k} = a{k}._launch_view or _of_tensor(a{k})",
                f"    if v{k}[{KEY}] != K{k} or a{k}._moved is not None or a{k}._storage.claims:",
                "        return False"]
    torch = sys.modules.get("torch")
    dt, ndim, contiguous = view[KEY]
    if torch is not None and not _TORCH_DTYPES:
        _torch_dtypes()
    if torch is not None and kind is torch.Tensor and contiguous and \
            _TORCH_DTYPES.get(arg.dtype) is dt and not arg.is_neg():
        consts[f"D{k}"], consts[f"S{k}"] = arg.dtype, dt.itemsize
        consts["TORCH"] = torch._C._cuda_getCurrentRawStream
        return [f"    if type(a{k}) is not T{k} or a{k}.dtype is not D{k} or "
                f"a{k}.get_device() != 0 or a{k}.is_neg() or not a{k}.is_contiguous():",
                "        return False",
                f"    p = a{k}.data_ptr()",
                f"    v{k} = (K{k}, p, a{k}.shape, a{k}.stride(), p, p + a{k}.numel() * S{k}, "
                f"a{k}, 0)",
                f"    if len(v{k}[2]) != {ndim}:", "        return False"]
    consts[f"R{k}"] = reader(kind, "cuda")
    return [f"    if type(a{k}) is not T{k}:", "        return False",
            f"    v{k} = R{k}(a{k}, 0)",
            f"    if v{k} is None or v{k}[{KEY}] != K{k}:", "        return False"]


def _admits(plan) -> list[str]:
    """``LaunchPlan.admits`` for this plan's parameters, unrolled."""
    lines = []
    for w in plan.written:
        others = [k for k in plan.arrays if k != w]
        lines.append(f"    lo, hi = v{w}[{LO}], v{w}[{HI}]")
        test = f"v{w}[{FLAGS}]"
        if others:
            shared = " or ".join(f"(v{k}[{LO}] < hi and lo < v{k}[{HI}])" for k in others)
            test += f" or (lo != hi and ({shared}))"
        lines += [f"    if {test}:", "        return False"]
    shapes = " or ".join(f"v{k}[{SHAPE}] != s[{i}]" for i, k in enumerate(plan.arrays))
    lines += ["    s = PLAN.shapes", f"    if s is None{' or ' + shapes if shapes else ''}:",
              "        return False"]
    return lines


def _run(plan, consts: dict) -> list[str]:
    """``LaunchPlan.run``'s common case for this plan's parameters."""
    consts["PLAN"] = plan
    n = len(plan.names)
    views = ", ".join(f"v{k}" if k in plan.arrays else f"a{k}" for k in range(n))
    lines = ["    chosen = getattr(_slocal, 'chosen', None)",
             "    stream = chosen[-1] if chosen else _current()",
             "    if not stream._leases:",  # an fl.capture() block: the launcher records it
             "        return False"]
    if consts.get("TORCH"):  # torch's pending work first, as of_torch orders it (args.py)
        lines += ["    theirs = TORCH(0)",   # the legacy default (torch's 0) needs no call
                  "    if theirs != stream.handle and (theirs or _LEGACY) != stream.handle:",
                  "        _follow(stream, theirs)"]
    owned = [k for k in plan.arrays if consts[f"T{k}"] is Tensor]
    for k in owned:  # the order check's common case: every fearless tensor last written here
        lines += [f"    w = a{k}._storage.writer",
                  "    if w is not None and w[0] is not stream:",
                  f"        PLAN.run(args, ({views},), stream)",
                  "        return True"]
    if plan.requires is not None:
        consts["REQUIRES"] = plan.requires
        lines.append("    REQUIRES(args)")
    if plan.scalars:  # converted before the writes are recorded; a refusal: the general path
        lines.append("    try:")
        for k, convert in plan.scalars:
            consts[f"C{k}"] = convert
            lines.append(f"        c{k} = C{k}({plan.names[k]!r}, a{k})")
        lines += ["    except _ArgumentTypeError:", "        return False"]
    written = [k for k in plan.written if k in owned]
    if written:
        lines += ["    seq = stream.seq = stream.seq + 1"]
        lines += [f"    a{k}._storage.writer = (stream, seq)" for k in written]
    values = []
    for k in range(n):
        values.append(f"v{k}" if k in plan.arrays else f"c{k}")
    lines.append("    word = 0")
    if plan.sites:
        shapes = ", ".join(f"{plan.names[k]!r}: v{k}[{SHAPE}]" for k in plan.arrays)
        consts["SITES"] = plan.sites
        lines.append(f"    word = _words(stream).acquire({plan.kernel!r}, SITES, {{{shapes}}})")
    for k in plan.arrays:  # an empty array's own pointer may be null: pass a valid one
        lines += [f"    if v{k}[{LO}] == v{k}[{HI}]:", f"        v{k} = (v{k}[0], word) + v{k}[2:]"]
    if not plan.empty:
        consts.update(FN=plan.function, GRID=plan.grid, BLOCK=plan.block, FILL=plan.params.fill)
        lines.append(f"    _pack.launch(FN, GRID, BLOCK, {plan.shared}, stream.handle, "
                     f"FILL([{', '.join(values)}], word, {plan.threads}), {plan.kernel!r})")
    lines += ["    batch = stream._batch", "    batch.append(args)",
              "    if len(batch) >= _LEASES:", "        stream._seal()",
              "    return True"]
    return lines
