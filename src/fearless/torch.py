"""``fearless.torch.custom_op``: a fearless kernel as a PyTorch custom operator.

    @fl.kernel
    def saxpy(a: fl.f32, x: fl.Slice[fl.f32], y: fl.Slice[fl.f32], out: fl.DisjointSlice[fl.f32]):
        ...

    op = fearless.torch.custom_op(
        "mylib::saxpy", saxpy,
        outputs={"out": lambda a, x, y: (x.shape, x.dtype)},
        launch=lambda a, x, y: saxpy.prepare(x.numel()))
    z = op(2.0, x, y)              # also torch.ops.mylib.saxpy(2.0, x, y)

The operator is registered with ``torch.library.custom_op`` (torch 2.4 or newer): its inputs
are the kernel's parameters that are neither outputs nor ``constants``, in the kernel's order,
and its schema follows their annotations (arrays are ``Tensor``; scalars ``float``, ``int``,
``bool``, or ``Scalar`` for a TypeVar; a tile kernel's ``ft.Const`` keeps its type and
default). A call allocates each output with torch (``torch.empty``, so torch owns it), launches
the kernel on torch's current stream and returns the outputs (one Tensor, or a tuple). A fake
implementation, made from the same ``outputs`` callbacks, lets ``torch.compile`` trace the
operator without a graph break. ``backward=`` registers autograd through
``torch.library.register_autograd``.

Bad arguments raise the typed fearless errors a direct launch raises (``ArgumentTypeError``,
``ContractError``, ``AliasError``, ``KernelBoundsError`` at the next synchronisation), through
torch's dispatcher unchanged. Inside a ``torch.cuda.CUDAGraph`` capture the launch goes to the
capturing stream (``runtime/graph.py``'s ``foreign_capture``): run the operator once before
capturing, as torch asks for any operator, so that its kernel is compiled and loaded; a read
out of bounds during a replay is skipped (it reads 0) but not reported.

Not supported: inputs the kernel writes (torch's ``mutates_args``; a written array must be an
output), outputs that alias an input, a SIMT parameter without annotation (name it in
``constants`` or annotate it). torch is imported when ``custom_op`` is called, never by
``import fearless``.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from fearless import dtypes
from fearless.errors import ArgumentTypeError, ContractError
from fearless.kernel import params as P
from fearless.kernel.simt import Kernel
from fearless.kernel.tile import TileKernel
from fearless.runtime import args as args_, device, graph
from fearless.runtime import stream as streams
from fearless.runtime.launch import PreparedLaunch
from fearless.runtime.tensor import as_tensor
from fearless.tracebacks import user_facing

_SCALAR_SCHEMA = {dtypes.Kind.FLOAT: "float", dtypes.Kind.INT: "int", dtypes.Kind.UINT: "int",
                  dtypes.Kind.BOOL: "bool"}
_CONST_SCHEMA = {int: "int", float: "float", bool: "bool"}
_TICKETS = 64  # PreparedLaunches kept per operator (their launch plans are the fast path)


@user_facing
def custom_op(name: str, kernel: Kernel | TileKernel, *,
              outputs: Mapping[str, Callable[..., tuple]],
              launch: Any, constants: Mapping[str, Any] | None = None,
              backward: Callable[..., Any] | None = None,
              setup_context: Callable[..., None] | None = None,
              device_type: str | None = None):
    """Register ``kernel`` as the torch operator ``name`` (``"namespace::op"``) and return it
    (torch's ``CustomOpDef``: call it, or use ``torch.ops.namespace.op``).

    ``outputs``: each output parameter's name (a SIMT written array, a tile ``ft.Out`` or
    ``ft.Atomic``) -> a callable taking the operator's inputs and returning ``(shape, dtype)``
    or ``(shape, dtype, fill)``: shape a tuple or ``torch.Size``, dtype a torch dtype or a
    fearless one, ``fill`` a value to fill the output with first (an atomic sum needs 0);
    without it the output is ``torch.empty``. Called with fake tensors under
    ``torch.compile``, so use only shapes and dtypes.
    ``launch``: a SIMT kernel's ``PreparedLaunch``, or a callable taking the inputs and
    returning one (``lambda x: k.prepare(x.numel())``); a tile kernel's tile shape of its
    ``ft.Out`` partitions, one for all or a dict by output name, or a callable returning that.
    ``constants``: parameters fixed at registration (not inputs of the operator).
    ``backward``: ``backward(ctx, *grads)`` returning one gradient per input (None where
    there is none), as ``torch.library.register_autograd`` takes it; by default
    ``ctx.inputs`` and ``ctx.outputs`` hold the forward's inputs and outputs (saved with
    ``ctx.save_for_backward``); ``setup_context(ctx, inputs, output)`` replaces that.
    ``device_type``: the outputs' torch device type when no input is a tensor (default: the
    fearless backend's, ``"cuda"`` or ``"cpu"``).

    Raises ContractError when ``outputs``/``constants`` do not fit the kernel's parameters (an
    unknown name, an output that is not written, a written array that is not an output, an
    unannotated parameter) and TypeError when ``kernel`` is not a fearless kernel; torch
    raises RuntimeError when ``name`` is already registered.
    """
    import torch

    if not isinstance(kernel, (Kernel, TileKernel)):
        raise TypeError(f"custom_op takes a fearless kernel (@fl.kernel or @ft.kernel), got "
                        f"{type(kernel).__name__}")
    op = _Op(torch, kernel, dict(outputs), launch, dict(constants or {}), device_type)
    defined = torch.library.custom_op(name, op.run, mutates_args=(), schema=op.schema())
    defined.register_fake(op.fake)
    if backward is not None:
        defined.register_autograd(op.adapt_backward(backward) if setup_context is None
                                  else backward, setup_context=setup_context or op.save)
    return defined


class _Op:
    """One registered kernel: the inputs' and outputs' parameters, and the calls torch makes."""

    def __init__(self, torch, kernel, outputs: dict, launch, constants: dict,
                 device_type: str | None):
        self.torch, self.kernel, self.launch = torch, kernel, launch
        self.tile = isinstance(kernel, TileKernel)
        self.specs = outputs
        self.constants = constants
        self.device_type = device_type
        self.tickets: dict = {}
        params = {p.name: p for p in kernel.params}
        if not outputs:
            raise ContractError("a custom op needs at least one output", kernel=kernel.name,
                                help="name the arrays the kernel writes in outputs")
        for what, names in (("outputs", outputs), ("constants", constants)):
            for n in names:
                if n not in params:
                    raise ContractError(f"{what} names '{n}', which is not a parameter of the "
                                        f"kernel", kernel=kernel.name,
                                        help=f"the parameters: {', '.join(params)}")
        self.inputs = [p for p in kernel.params if p.name not in outputs and
                       p.name not in constants]
        for p in kernel.params:
            if p.name in outputs and not (p.written and p.kind is not P.SCALAR):
                raise ContractError("is named in outputs, but the kernel does not write it",
                                    kernel=kernel.name, param=p.name,
                                    help="outputs are written arrays (fl.DisjointSlice, ...) "
                                         "or ft.Out / ft.Atomic tensors")
        for p in self.inputs:
            if p.written:
                raise ContractError("the kernel writes this input; a custom op's written "
                                    "arrays are its outputs (torch's mutates_args is not "
                                    "supported)", kernel=kernel.name, param=p.name,
                                    help=f"name '{p.name}' in outputs")
            if p.kind is P.ANY:
                raise ContractError("has no annotation, so the operator's schema cannot say "
                                    "whether it is a tensor or a scalar", kernel=kernel.name,
                                    param=p.name, help="annotate it (fl.Slice[f32], f32, ...) "
                                                       "or fix it in constants")
        self.order = [p.name for p in kernel.params]
        self.outputs = [p for p in kernel.params if p.name in outputs]

    def schema(self) -> str:
        """The operator's schema: ``(Tensor x, float a, ...) -> Tensor`` (or a tuple)."""
        args = []
        for p in self.inputs:
            if p.kind in (P.ARRAY, P.IN):
                args.append(f"Tensor {p.name}")
            elif p.kind is P.CONST:
                kind = _CONST_SCHEMA.get(p.dtype, "Scalar")
                default = "" if p.default is P.NO_DEFAULT else f"={p.default!r}"
                args.append(f"{kind} {p.name}{default}")
            else:
                kind = getattr(p.dtype, "kind", None)
                args.append(f"{_SCALAR_SCHEMA.get(kind, 'Scalar')} {p.name}")
        returns = ", ".join("Tensor" for _ in self.outputs)
        return f"({', '.join(args)}) -> " + (returns if len(self.outputs) == 1
                                              else f"({returns})")

    # the calls torch makes --------------------------------------------------------------------

    def _complete(self, inputs: tuple) -> tuple:
        """``inputs`` with the defaults of those left out (torch passes what the caller gave)."""
        return inputs + tuple(p.default for p in self.inputs[len(inputs):])

    def _allocate(self, inputs: tuple, fake: bool) -> list:
        torch = self.torch
        where = next((x.device for x in inputs if isinstance(x, torch.Tensor)), None)
        if where is None:
            where = self.device_type or device.current_backend()
        outs = []
        for p in self.outputs:
            shape, dtype, *fill = self.specs[p.name](*inputs)
            if not isinstance(dtype, torch.dtype):
                dtype = _torch_dtype(dtypes.coerce(dtype))
            if fill and not fake:
                outs.append(torch.full(tuple(shape), fill[0], dtype=dtype, device=where))
            else:
                outs.append(torch.empty(tuple(shape), dtype=dtype, device=where))
        return outs

    def fake(self, *inputs):
        """The outputs' shapes and dtypes, for torch.compile's tracing (no launch)."""
        outs = self._allocate(self._complete(inputs), True)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def run(self, *inputs):
        """Allocate the outputs, launch the kernel on torch's current stream, return them."""
        torch = self.torch
        inputs = tuple(x.detach() if isinstance(x, torch.Tensor) and x.requires_grad else x
                       for x in self._complete(inputs))
        outs = self._allocate(inputs, False)
        values = dict(self.constants)
        values.update(zip((p.name for p in self.inputs), inputs))
        values.update(zip((p.name for p in self.outputs), outs))
        on_cuda = outs and outs[0].is_cuda
        if on_cuda and torch.cuda.is_current_stream_capturing():
            words = torch.zeros(4, dtype=torch.int64, device=outs[0].device)  # one slot
            with graph.foreign_capture(torch.cuda.current_stream().cuda_stream,
                                       words.data_ptr(), 1, words):
                self._launch(inputs, values)
        elif on_cuda and getattr(streams._local, "chosen", None):
            with streams.stream(torch.cuda.current_stream()):  # not an fl.stream() block's
                self._launch(inputs, values)
        else:
            self._launch(inputs, values)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _launch(self, inputs: tuple, values: dict) -> None:
        how = self.launch(*inputs) if callable(self.launch) else self.launch
        if not self.tile:
            if isinstance(how, PreparedLaunch):  # the first equal ticket holds the plans
                ticket = self.tickets.get(how)
                if ticket is None:
                    if len(self.tickets) >= _TICKETS:
                        self.tickets.clear()
                    ticket = self.tickets[how] = how
                how = ticket
            self.kernel[how](*[values[n] for n in self.order])
            return
        for p in self.outputs:
            if p.kind is P.OUT:
                tile = how.get(p.name) if isinstance(how, Mapping) else how
                values[p.name] = self._tensor(p, values[p.name]).partition(tile)
        self.kernel(*[values[n] for n in self.order]).enqueue()

    def _tensor(self, p: P.Param, out):
        t = as_tensor(out)
        if t is None:
            raise ArgumentTypeError(f"the output is a torch tensor on {out.device}, not an "
                                    f"array on the {device.current_backend()} backend",
                                    kernel=self.kernel.name, param=p.name,
                                    help="pass inputs on the device the backend runs on")
        return t

    # autograd ---------------------------------------------------------------------------------

    def save(self, ctx, inputs: tuple, output) -> None:
        """The default ``setup_context``: every input and output, tensors saved for backward."""
        outs = output if isinstance(output, tuple) else (output,)
        values = (*inputs, *outs)
        tensor = self.torch.Tensor
        ctx.save_for_backward(*(v for v in values if isinstance(v, tensor)))
        ctx.fearless_layout = (len(inputs), tuple(None if isinstance(v, tensor) else (v,)
                                                  for v in values))

    @staticmethod
    def adapt_backward(backward: Callable[..., Any]) -> Callable[..., Any]:
        """``backward`` with ``ctx.inputs`` and ``ctx.outputs`` set from what ``save`` kept."""
        def run(ctx, *grads):
            saved = iter(ctx.saved_tensors)
            count, layout = ctx.fearless_layout
            values = tuple(next(saved) if v is None else v[0] for v in layout)
            ctx.inputs, ctx.outputs = values[:count], values[count:]
            return backward(ctx, *grads)
        return run


def _torch_dtype(dt: dtypes.DType):
    if not args_._TORCH_DTYPES:
        args_._torch_dtypes()
    for theirs, ours in args_._TORCH_DTYPES.items():
        if ours is dt:
            return theirs
    raise TypeError(f"torch has no dtype for fearless's {dt}")
