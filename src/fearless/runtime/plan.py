"""The launch fast path: a LaunchPlan per (launch configuration, argument signature).

The first launch of a signature runs every check the slow way (``runtime/launch.py``, with the
arguments as Tensors, so each refusal has its full message) and then makes a plan: everything
that cannot change between launches with that signature, computed once (the loaded function,
the grid, the parameter buffer, which parameters are written, how each scalar converts). A
repeat launch then does work proportional to its arguments (``LaunchPlan.run``):

* per array, its view (``runtime/args.py``): a moved fearless Tensor, memory a pending
  operation holds, a written argument that is read-only or overlaps itself, or two arguments
  of which one is written sharing bytes all send the launch back to the slow path, which
  raises the error;
* the shape-dependent checks (coverage of the outputs, the bounds proofs' preconditions) run
  again only when the shapes differ from the last ones checked;
* ``requires`` relations run at every launch (they read scalar values);
* then one parameter pack and one ``cuLaunchKernel`` (``runtime/pack.py``), and the arguments
  are leased to the stream until the GPU has finished with them (``stream.Stream.lease``).
"""
from __future__ import annotations

from fearless.errors import ArgumentTypeError
from fearless.runtime import dispatch, fastcall, pack
from fearless.runtime.args import FLAGS, HI, LO, OBJ, SHAPE, converter
from fearless.runtime.stream import check_order
from fearless.runtime.tensor import Tensor


class LaunchPlan:
    """One checked launch configuration of one compiled kernel for one argument signature.

    ``function``: the CUfunction/CUkernel address; ``grid``/``block``: three axes each, as
    launched; ``shared``: dynamic shared bytes; ``params``: the ParamBuffer; ``written``,
    ``arrays``: parameter indices; ``scalars``: (index, ``args.converter``) pairs; ``sites``: bounds
    sites (an error word per launch when any); ``threads``: a coarsened kernel's thread count;
    ``shapes``: the argument shapes the slow path last checked (None: none yet)."""

    __slots__ = ("kernel", "names", "function", "grid", "block", "shared", "params", "written",
                 "arrays", "scalars", "sites", "threads", "shapes", "requires", "empty",
                 "fasts")

    def __init__(self, kernel: str, info, function: int, grid: tuple, block: tuple, shared: int,
                 params: pack.ParamBuffer, threads: int = 0, requires=None):
        self.kernel, self.names = kernel, info.names
        self.function, self.shared, self.params = function, shared, params
        self.grid = tuple(grid) + (1,) * (3 - len(grid))
        self.block = tuple(block) + (1,) * (3 - len(block))
        self.empty = 0 in self.grid
        self.written = tuple(k for k, p in enumerate(info.params) if p.is_array and p.written)
        self.arrays = tuple(k for k, p in enumerate(info.params) if p.is_array)
        self.scalars = tuple((k, converter(p.dtype)) for k, p in enumerate(info.params)
                             if not p.is_array)
        self.sites = info.bounds_sites
        self.threads = threads
        self.requires = requires
        self.shapes = None
        self.fasts: dict = {}  # argument types -> this plan's steps for them (fast_for)

    def admits(self, views) -> bool:
        """Whether the fast path may launch with these views: nothing the slow path refuses
        (see the module docstring) and shapes it has checked."""
        for k in self.arrays:
            obj = views[k][OBJ]
            if type(obj) is Tensor and (obj._moved is not None or obj._storage.claims):
                return False
        for w in self.written:
            v = views[w]
            if v[FLAGS]:
                return False
            lo, hi = v[LO], v[HI]
            if lo == hi:
                continue
            for k in self.arrays:
                o = views[k]
                if k != w and o[LO] < hi and lo < o[HI]:
                    return False
        return self.shapes == tuple(views[k][SHAPE] for k in self.arrays)

    def fast_for(self, args, views):
        """This plan's steps for arguments of the types of ``args`` as one generated function
        (``runtime/fastcall.py``), made once per types (None: those types get none): fearless
        and torch tensors of the same dtypes share a plan but not a fast function."""
        kinds = tuple(map(type, args))
        if kinds not in self.fasts:
            self.fasts[kinds] = fastcall.build(self, args, views)
        return self.fasts[kinds]

    def run(self, args, views, stream) -> None:
        """Enqueue one launch on ``stream`` (the checks of ``admits`` passed): ordered after
        the writes of other streams to its fearless tensors (``stream.check_order``)."""
        if self.requires is not None:
            self.requires(args)
        a = list(views)  # scalars converted before this launch records its writes
        try:
            for k, convert in self.scalars:
                a[k] = convert(self.names[k], args[k])
        except ArgumentTypeError as exc:
            raise exc.with_kernel(self.kernel) from None
        if stream._leases:  # check_order's common case inline: no write from another stream
            for k in self.arrays:
                obj = views[k][OBJ]
                if type(obj) is Tensor and obj._storage.writer is not None and \
                        obj._storage.writer[0] is not stream:
                    tensors = [v[OBJ] if type(v) is tuple and type(v[OBJ]) is Tensor else None
                               for v in views]
                    check_order(stream, self.kernel, self.names, tensors,
                                [j in self.written for j in range(len(views))])
                    break
            else:
                seq = 0
                for k in self.written:
                    obj = views[k][OBJ]
                    if type(obj) is Tensor:
                        if not seq:
                            seq = stream.seq = stream.seq + 1
                        obj._storage.writer = (stream, seq)
        word = 0
        if self.sites:
            word = dispatch.error_words(stream).acquire(
                self.kernel, self.sites, {self.names[k]: views[k][SHAPE] for k in self.arrays})
        for k in self.arrays:
            v = a[k]
            if v[LO] == v[HI]:  # an empty array's own pointer may be null: pass a valid one
                a[k] = (v[0], word) + v[2:]
        if not self.empty:
            pack.launch(self.function, self.grid, self.block, self.shared, stream.handle,
                        self.params.fill(a, word, self.threads), self.kernel)
        stream.lease(args)

