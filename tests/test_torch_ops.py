"""fearless.torch.custom_op: fearless kernels as torch operators (schema, fake implementation
under torch.compile, autograd, the typed errors through torch's dispatcher; on the GPU
torch.compile with inductor, CUDA graphs, torch's current stream and the host cost)."""
from __future__ import annotations

import math
import re
import runpy
import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import fearless as fl  # noqa: E402
import fearless.torch as flt  # noqa: E402
from fearless import f32, i32  # noqa: E402
from fearless import tile as ft  # noqa: E402
from fearless.errors import ArgumentTypeError, ContractError, KernelBoundsError  # noqa: E402

_names = iter(range(10**6))


def _name(base: str) -> str:
    """A fresh operator name: torch refuses a second registration of one name."""
    return f"fearless_tests::{base}_{next(_names)}"


@fl.kernel
def saxpy(a: f32, x: fl.Slice[f32], y: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = a * x[i] + y[i]


@fl.kernel
def relu(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = max(x[i], 0.0)


@fl.kernel
def relu_grad(x: fl.Slice[f32], g: fl.Slice[f32], dx: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    if i < len(dx):
        dx[i] = g[i] if x[i] > 0.0 else 0.0


@fl.kernel
def split(x: fl.Slice[f32], lo: fl.DisjointSlice[f32], hi: fl.DisjointSlice[i32]):
    i = fl.thread.index_1d()
    if i < len(lo):
        whole = math.floor(x[i])
        lo[i] = x[i] - whole
        hi[i] = int(whole)


@fl.kernel
def move(x: fl.DisjointSlice[f32], y: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    if i < len(y):
        y[i] = x[i]
        x[i] = 0.0


@ft.kernel
def tile_scale(z: ft.Out[f32], x: ft.In[f32], times: ft.Const[int] = 3):
    z.store(ft.load_like(x, z) * float(times))


def _saxpy_op(**extra):
    return flt.custom_op(_name("saxpy"), saxpy,
                         outputs={"out": lambda a, x, y: (x.shape, x.dtype, float("nan"))},
                         launch=lambda a, x, y: saxpy.prepare(x.numel()), **extra)


def _relu_ops():
    """relu with a backward that is a fearless operator too."""
    grad = flt.custom_op(_name("relu_grad"), relu_grad,
                         outputs={"dx": lambda x, g: (x.shape, x.dtype)},
                         launch=lambda x, g: relu_grad.prepare(x.numel()))

    def backward(ctx, g):
        (x,) = ctx.inputs
        return grad(x, g.contiguous())
    return flt.custom_op(_name("relu"), relu, outputs={"out": lambda x: (x.shape, x.dtype)},
                         launch=lambda x: relu.prepare(x.numel()), backward=backward)


def _rand(*shape, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(device)


# -- registration and schema ---------------------------------------------------------------------
def test_the_operator_computes_the_kernel_and_takes_its_schema_from_the_annotations():
    op = _saxpy_op()
    x, y = _rand(1000, seed=1), _rand(1000, seed=2)
    got = op(2.5, x, y)
    assert got.dtype == torch.float32 and got.shape == (1000,)
    np.testing.assert_allclose(got.numpy(), 2.5 * x.numpy() + y.numpy(), rtol=1e-6, atol=1e-6)
    ns, name = op._qualname.split("::")
    schema = str(getattr(getattr(torch.ops, ns), name).default._schema)
    assert schema.endswith("(float a, Tensor x, Tensor y) -> Tensor")
    torch.testing.assert_close(getattr(getattr(torch.ops, ns), name)(2.5, x, y), got)


def test_several_outputs_come_back_as_a_tuple_in_the_kernels_order():
    op = flt.custom_op(_name("split"), split,
                       outputs={"hi": lambda x: (x.shape, torch.int32),
                                "lo": lambda x: (x.shape, "f32")},
                       launch=lambda x: split.prepare(x.numel()))
    x = _rand(300, seed=3) * 10
    lo, hi = op(x)
    assert lo.dtype == torch.float32 and hi.dtype == torch.int32
    np.testing.assert_array_equal(hi.numpy(), np.floor(x.numpy()).astype(np.int32))
    np.testing.assert_allclose(lo.numpy(), x.numpy() - np.floor(x.numpy()), atol=1e-5)


def test_a_tile_kernel_gets_its_partitions_and_keeps_its_const_default():
    op = flt.custom_op(_name("tile_scale"), tile_scale,
                       outputs={"z": lambda x, times: (x.shape, x.dtype)}, launch=(64,))
    assert str(op._opoverload._schema).endswith("(Tensor x, int times=3) -> Tensor")
    x = _rand(200, seed=4)  # a partial last tile
    torch.testing.assert_close(op(x), x * 3)
    torch.testing.assert_close(op(x, 5), x * 5)


def test_constants_are_fixed_at_registration():
    op = flt.custom_op(_name("double"), saxpy, outputs={"out": lambda x, y: (x.shape, x.dtype)},
                       constants={"a": 2.0}, launch=lambda x, y: saxpy.prepare(x.numel()))
    x, y = _rand(50, seed=5), _rand(50, seed=6)
    torch.testing.assert_close(op(x, y), 2 * x + y)


@pytest.mark.parametrize("kwargs, match", [
    (dict(outputs={"z": lambda *a: None}), "outputs names 'z', which is not a parameter"),
    (dict(outputs={"x": lambda *a: None}), "parameter 'x': is named in outputs, but the kernel "
                                           "does not write it"),
    (dict(outputs={}), "needs at least one output"),
])
def test_outputs_that_do_not_fit_the_kernel_are_refused_at_registration(kwargs, match):
    with pytest.raises(ContractError, match=match):
        flt.custom_op(_name("bad"), saxpy, launch=None, **kwargs)


def test_a_kernel_that_writes_an_input_is_refused():
    with pytest.raises(ContractError, match="parameter 'x': the kernel writes this input.*"
                                            "mutates_args is not supported"):
        flt.custom_op(_name("in_place"), move, outputs={"y": lambda x: (x.shape, x.dtype)},
                      launch=None)


# -- errors through torch's dispatcher ----------------------------------------------------------
def test_bad_inputs_raise_the_typed_fearless_errors_through_torch():
    op = _saxpy_op()
    x = _rand(64, seed=7)
    with pytest.raises(ArgumentTypeError, match=r"kernel 'saxpy', parameter 'y': expects dtype "
                                                r"f32, got f64"):
        op(1.0, x, x.double())
    with pytest.raises(ArgumentTypeError, match="parameter 'y': expects dtype f32, got i32"):
        op(1.0, x, x.int())
    op(1.0, x, x[:10])  # y shorter than the output: the reads past it are reported at the sync
    with pytest.raises(KernelBoundsError, match=r"kernel 'saxpy', parameter 'y': read out of "
                                                r"bounds: index 10, but the length is 10"):
        fl.synchronize()


def test_errors_survive_torch_compile():
    op = _saxpy_op()
    f = torch.compile(lambda x, y: op(1.0, x, y) + 1, fullgraph=True, backend="aot_eager")
    with pytest.raises(ArgumentTypeError, match="parameter 'y': expects dtype f32, got f64"):
        f(_rand(8), _rand(8).double())


# -- torch.compile and autograd ------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_torch_compile_traces_the_operator_without_a_graph_break(backend):
    op = _saxpy_op()
    x, y = _rand(128, seed=8), _rand(128, seed=9)

    def f(x, y):
        return (op(3.0, x, y) * 2).sum()
    assert torch._dynamo.explain(f)(x, y).graph_break_count == 0
    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True, backend=backend)
    torch.testing.assert_close(compiled(x, y), ((3 * x + y) * 2).sum())
    x2, y2 = _rand(77, seed=10), _rand(77, seed=11)  # another shape: traced again or dynamic
    torch.testing.assert_close(compiled(x2, y2), ((3 * x2 + y2) * 2).sum())


def test_the_backward_kernel_gives_relus_gradient():
    op = _relu_ops()
    x = _rand(500, seed=12)
    x[::7] = 0.0  # relu's kink: torch's gradient there is 0, as the kernel's
    a = x.clone().requires_grad_()
    b = x.clone().requires_grad_()
    w = _rand(500, seed=13)
    (op(a) * w).sum().backward()
    (torch.relu(b) * w).sum().backward()
    torch.testing.assert_close(a.grad, b.grad)
    torch.testing.assert_close(op(a).detach(), torch.relu(x))


def test_autograd_through_torch_compile():
    op = _relu_ops()
    x = _rand(64, seed=14)
    a = x.clone().requires_grad_()
    f = torch.compile(lambda t: (op(t) ** 2).sum(), fullgraph=True, backend="aot_eager")
    f(a).backward()
    torch.testing.assert_close(a.grad, 2 * torch.relu(x))


def test_the_readme_example_runs(tmp_path, capsys):
    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", text, re.S)
                 if "fearless.torch.custom_op" in b)
    script = tmp_path / "readme_custom_op.py"  # a file: the kernel's source is read from it
    script.write_text(block)
    runpy.run_path(str(script))
    assert capsys.readouterr().out.splitlines() == ["tensor([2., 3., 4., 5.])",
                                                    "torch.Size([1000])"]


# -- on the GPU ----------------------------------------------------------------------------------
def _cuda():
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")


class _MLP(torch.nn.Module):
    def __init__(self, act):
        super().__init__()
        self.act = act
        self.l1, self.l2 = torch.nn.Linear(64, 256), torch.nn.Linear(256, 32)

    def forward(self, x):
        return self.l2(self.act(self.l1(x).contiguous()))


@pytest.mark.gpu
def test_an_mlp_with_a_fearless_activation_is_the_same_eager_and_under_inductor():
    _cuda()
    op = _relu_ops()
    torch.manual_seed(0)
    model = _MLP(lambda t: op(t.reshape(-1)).reshape(t.shape)).cuda()
    x = torch.randn(16, 64, device="cuda")
    eager = model(x)
    torch.testing.assert_close(eager, torch.nn.Sequential(model.l1, torch.nn.ReLU(), model.l2)(x))
    compiled = torch.compile(model, fullgraph=True)
    torch.testing.assert_close(compiled(x), eager)
    xg = x.clone().requires_grad_()
    compiled(xg).sum().backward()
    xr = x.clone().requires_grad_()
    torch.nn.Sequential(model.l1, torch.nn.ReLU(), model.l2)(xr).sum().backward()
    torch.testing.assert_close(xg.grad, xr.grad)


@pytest.mark.gpu
def test_the_operator_replays_inside_a_torch_cuda_graph():
    _cuda()
    op = _saxpy_op()
    tile_op = flt.custom_op(_name("tile_scale"), tile_scale,
                            outputs={"z": lambda x, times: (x.shape, x.dtype)}, launch=(256,))
    x = torch.randn(4096, device="cuda")
    y = torch.randn(4096, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up: compile and load outside the capture
        tile_op(op(2.0, x, y), 5)  # the specialisation the capture uses
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = tile_op(op(2.0, x, y), 5)
    for k in range(3):
        x.copy_(torch.randn(4096, device="cuda"))
        y.fill_(float(k))
        g.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(out, (2 * x + y) * 5)
    fl.synchronize()  # nothing deferred is left behind by the capture


@pytest.mark.gpu
def test_the_operator_runs_on_torchs_current_stream():
    _cuda()
    op = _saxpy_op()
    n = 1 << 22
    s = torch.cuda.Stream()
    x = torch.randn(n, device="cuda")
    with torch.cuda.stream(s):
        for k in range(4):
            y = torch.full((n,), float(k), device="cuda")
            y = (y * 3).sin_().asin_() / 3  # torch work on s that the op must wait for
            out = op(2.0, x, y)
            torch.testing.assert_close(out, 2 * x + y)
        with fl.stream(fl.Stream()):  # an fl.stream() block: the op stays on torch's stream
            torch.testing.assert_close(op(1.0, x, y), x + y)
    s.synchronize()


@pytest.mark.gpu
def test_host_cost_of_the_operator_against_a_direct_launch(capsys):
    _cuda()
    op = flt.custom_op(_name("saxpy"), saxpy, outputs={"out": lambda a, x, y: (x.shape, x.dtype)},
                       launch=lambda a, x, y: saxpy.prepare(x.numel()))  # torch.empty outputs
    x, y = torch.randn(1024, device="cuda"), torch.randn(1024, device="cuda")
    out = torch.empty_like(x)
    launch = saxpy.prepare(1024)

    def per_call(f, repeat=2000):
        f()
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(repeat):
            f()
        torch.cuda.synchronize()
        return (time.perf_counter() - t) / repeat * 1e6

    direct = per_call(lambda: saxpy[launch](2.0, x, y, out))
    custom = per_call(lambda: op(2.0, x, y))
    native = per_call(lambda: torch.add(y, x, alpha=2.0))
    with capsys.disabled():
        print(f"\nhost cost per call: fearless launch {direct:.1f} us, custom op {custom:.1f} us, "
              f"torch.add {native:.1f} us")
    torch.testing.assert_close(op(2.0, x, y), 2 * x + y)
