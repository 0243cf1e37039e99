"""End-to-end LLM benchmark on the GPU: fearless.models beside Hugging Face transformers.

Models (bf16, random weights, built on the GPU with ``AutoModelForCausalLM.from_config``; the
fearless model reads the very same weight tensors in place, no copy):
    qwen3-1.7b     Qwen3-1.7B's shape: hidden 2048, 28 layers, 16 q / 8 kv heads of 128,
                   intermediate 6144, vocab 151936, tied embeddings
    llama3.1-8b    Llama-3.1-8B's shape: hidden 4096, 32 layers, 32 q / 8 kv heads of 128,
                   intermediate 14336, vocab 128256, llama3 RoPE scaling
Parts (``--parts``, comma-separated; default all but profile):
    limit      copy bandwidth (``dst.copy_(src)`` over 2 GiB; 2 bytes moved per byte copied) and
               the weight-streaming limit of batch-1 decode: copy bandwidth / weight bytes
    prefill    fearless prefill tokens/s, 1 x 2048 and 8 x 512 (into a KV cache, last-position
               logits, as generate runs it)
    decode     fearless decode tokens/s, batch 1 and 16: a 1024-token prompt, then 128 new
               tokens (context 1024 growing by 128), the decode step captured once and replayed;
               the tokens are checked against transformers' greedy ones (agreeing prefix printed)
    hf         transformers eager (SDPA attention): prefill (``logits_to_keep=1``) and a greedy
               decode loop over its DynamicCache, the same sizes
    compile    transformers with a static cache under torch.compile, as its docs' "static
               cache and torch.compile" recipe says (generation_config.cache_implementation =
               "static"; model.forward = torch.compile(model.forward, mode="reduce-overhead",
               fullgraph=True); model.generate), decode batches ``--compile-batches``
               (default 1), timed per token by a streamer; a failure is reported, not fatal
    kernels    decode GEMV (fearless.nn.linear, T = 1, the largest projection: the fused
               gate | up) and decode attention (batch 16, context 1152) in % of copy
               bandwidth, device time: 100 calls (call i on the weights or KV cache of layer
               i mod the layer count: from DRAM, as in a decode step, not from L2) captured
               once with ``fl.capture()`` as generate captures its decode step; wall clock
               around a replay and its sync, best of ``--reps``, over 100 (the gaps between
               the graph's kernels included, as the model's decode graph has them). Beside
               each, the same 100 calls eager in us per call, host launch cost included (what
               an uncaptured caller pays)
    launches   kernel launches of one decode step at batch 1 (total, per layer, outside the
               layers), fused and with q/k/v and gate/up apart (fearless.models.launches)
    profile    (not in the default) device time per kernel of the captured decode step,
               batch 1 and 16, from torch.profiler (llm_profile.py; run with FEARLESS_PDL=0)
Every tokens/s is wall clock around the work, synchronised (host cost included, as a server
sees it), best of ``--reps`` after a warm-up that compiles and captures; so are the kernels
part's graph replays.

Run from the repository root on the GPU machine (about 5-7 minutes with every part; the first
run also compiles fearless's kernels, which the disk cache keeps):
    PYTHONPATH=src:benchmarks python3 benchmarks/bench_llm.py [--models qwen3-1.7b,llama3.1-8b]
        [--parts limit,prefill,decode,kernels,launches,hf,compile,profile] [--reps 3] [--compile-batches 1,16]
Output: the log as it goes, a table last; ``$OUT`` (default ./bench_out) gets bench_llm.json
and bench_llm.log. ``--dry-run`` (no GPU, no torch) runs the fearless parts once on the CPU
backend with a 2-layer model of each shape family.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

import fearless as fl
from fearless import nn
from fearless.models import CausalLM, launches
from fearless.models.config import parse_config
from llm_profile import decode_profile
from run_log import RunLog

SHAPES = {
    "qwen3-1.7b": dict(architectures=["Qwen3ForCausalLM"], model_type="qwen3",
                       vocab_size=151936, hidden_size=2048, intermediate_size=6144,
                       num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                       head_dim=128, max_position_embeddings=40960, rms_norm_eps=1e-6,
                       tie_word_embeddings=True,
                       rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
    "llama3.1-8b": dict(architectures=["LlamaForCausalLM"], model_type="llama",
                        vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                        num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                        head_dim=128, max_position_embeddings=131072, rms_norm_eps=1e-5,
                        tie_word_embeddings=False,
                        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0,
                                         "factor": 8.0, "low_freq_factor": 1.0,
                                         "high_freq_factor": 4.0,
                                         "original_max_position_embeddings": 8192}),
}
PREFILL = ((1, 2048), (8, 512))
DECODE_BATCHES = (1, 16)
CONTEXT, NEW = 1024, 128
KERNEL_CALLS = 100  # calls per timed graph replay (and eager loop) of the kernels part
ANCHOR = "Grout (cuTile + cuBLAS), Qwen3-4B on an RTX 5090, batch 1 decode: 171 tokens/s"


class Report(RunLog):
    def row(self, model: str, what: str, value: float | None, unit: str, note: str = ""):
        self.rows.append(dict(model=model, what=what, value=value, unit=unit, note=note))
        shown = "failed" if value is None else f"{value:,.1f} {unit}"
        self.log(f"  {model:12s} {what:34s} {shown} {note}")

    def table(self) -> None:
        self.log("\n== bench_llm: summary ==")
        for r in self.rows:
            shown = "failed" if r["value"] is None else f"{r['value']:>12,.1f} {r['unit']}"
            self.log(f"{r['model']:12s} {r['what']:34s} {shown:>22s}  {r['note']}")
        self.log(f"{'anchor':12s} {ANCHOR}")


def best_time(fn, reps: int, sync) -> float:
    """Best wall time of ``fn()`` over ``reps`` runs, synchronised before and after each."""
    times = []
    for _ in range(reps):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return min(times)


# -- building -----------------------------------------------------------------------------------
def hf_model(torch, transformers, shape: dict):
    """A random bf16 transformers model of ``shape`` on the GPU (initialised there)."""
    cls = {"qwen3": transformers.Qwen3Config, "llama": transformers.LlamaConfig}
    cfg = cls[shape["model_type"]](**{k: v for k, v in shape.items()
                                      if k not in ("architectures", "model_type")})
    cfg.architectures = shape["architectures"]
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    return model.eval()


def fearless_model(shape: dict, tensors: dict, fuse: bool = True) -> CausalLM:
    """The fearless model over ``tensors`` (name -> torch CUDA tensor or NumPy array): views,
    no copies, but for the fused q | k | v and gate | up matrices (``fuse``), which it copies
    (beside transformers' separate ones)."""
    config = parse_config(dict(shape, dtype="bfloat16"), "bench shape")
    return CausalLM(config, lambda name: fl.asarray(tensors[name]), fl.bf16, fuse)


def launch_rows(rep, name, model, unfused) -> None:
    """Kernel launches of one decode step at batch 1, fused (as the decode rows run) and, for
    comparison, with the projections apart (``unfused``: the same weights as views)."""
    for label, m in (("", model), (", unfused", unfused)):
        n = launches.decode_step(m, 1, CONTEXT + NEW)
        rep.row(name, f"decode launches per step{label}", n["step"], "launches",
                f"{n['per_layer']} per layer x {m.config.num_layers} + {n['outside']}")
        m.free_caches()


def weight_bytes(model: CausalLM) -> int:
    tensors = [model.embed, model.norm] + [t for layer in model.layers for t in layer.tensors()]
    if model.lm_head is not model.embed:
        tensors.append(model.lm_head)
    return sum(t.nbytes for t in tensors)


# -- parts --------------------------------------------------------------------------------------
def copy_bandwidth(torch) -> float:
    """Bytes per second moved by a device-to-device copy (read + write)."""
    n = 1 << 30
    src = torch.empty(n, dtype=torch.int16, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    t = best_time(lambda: [dst.copy_(src) for _ in range(10)], 3, torch.cuda.synchronize)
    return 2 * 2 * n * 10 / t


def fearless_prefill(rep, name, model, reps, sync, rng):
    for b, s in PREFILL:
        ids = rng.integers(0, model.config.vocab_size, b * s).astype(np.int32)
        cache = model.new_cache(b, s)
        ids_t = fl.asarray(ids)

        def run():
            return model.prefill(ids_t, b, s, cache, last_only=True)

        run()  # compiles
        t = best_time(run, reps, sync)
        rep.row(name, f"fearless prefill {b}x{s}", b * s / t, "tokens/s")


def fearless_decode(rep, name, model, reps, rng, hf_tokens=None, limit=None):
    for b in DECODE_BATCHES:
        prompt = rng.integers(0, model.config.vocab_size, (b, CONTEXT))
        model.generate(prompt, NEW + 1)  # compiles every kernel and captures the decode step
        best, tokens = None, None
        for _ in range(reps):
            tokens = model.generate(prompt, NEW + 1)
            rate = model.timing["decode_tokens"] / model.timing["decode_s"]
            best = rate if best is None else max(best, rate)
        note = f"{100 * best / limit:.0f}% of the streaming limit" if limit and b == 1 else ""
        if hf_tokens is not None:
            theirs = hf_tokens(prompt[:1], NEW + 1)
            same = next((i for i, (x, y) in enumerate(zip(tokens[0], theirs)) if x != y),
                        len(theirs))
            # random weights give near-tied logits, so greedy paths part early; the logits
            # themselves are checked against transformers by tests/models (gpu)
            note += (f"{'; ' if note else ''}the first {same} of {NEW + 1} greedy tokens match "
                     f"transformers' (random weights: near ties)")
        rep.row(name, f"fearless decode batch {b}", best, "tokens/s", note)
    model.free_caches()


def hf_parts(rep, name, torch, hf, reps, rng):
    sync = torch.cuda.synchronize
    with torch.no_grad():
        for b, s in PREFILL:
            ids = torch.as_tensor(rng.integers(0, hf.config.vocab_size, (b, s)), device="cuda")
            hf(ids, logits_to_keep=1)
            t = best_time(lambda: hf(ids, logits_to_keep=1), reps, sync)
            rep.row(name, f"transformers eager prefill {b}x{s}", b * s / t, "tokens/s")
        for b in DECODE_BATCHES:
            ids = torch.as_tensor(rng.integers(0, hf.config.vocab_size, (b, CONTEXT)),
                                  device="cuda")
            t = min(hf_decode(torch, hf, ids, NEW)[1] for _ in range(max(1, reps - 1)))
            rep.row(name, f"transformers eager decode batch {b}", b * NEW / t, "tokens/s")


def hf_decode(torch, hf, ids, steps: int):
    """transformers' greedy loop over its DynamicCache: (tokens of sequence 0, decode seconds
    of ``steps`` tokens after the prefill's)."""
    with torch.no_grad():
        out = hf(ids, use_cache=True, logits_to_keep=1)
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        tokens = [nxt]
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            out = hf(nxt, past_key_values=out.past_key_values, use_cache=True)
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            tokens.append(nxt)
        torch.cuda.synchronize()
        return torch.cat(tokens, 1)[0].tolist(), time.perf_counter() - t0


class TokenClock:
    """A generate() streamer that notes the time of each token it is handed (the prompt, then
    one call per step; generate checks its stopping criteria on the host every step, so the
    times follow the GPU)."""

    def __init__(self):
        self.times: list[float] = []

    def put(self, value) -> None:
        self.times.append(time.perf_counter())

    def end(self) -> None:
        pass


def hf_compiled(rep, name, torch, hf, batches, rng):
    """transformers 5's static-cache + torch.compile recipe (kv_cache.md, llm_optims.md):
    ``cache_implementation="static"``, and ``generate`` compiles the decode step's forward
    itself (``generation_config.compile_config``: reduce-overhead, fullgraph; the prefill
    stays eager). The older recipe that also wraps ``hf.forward`` in ``torch.compile`` by hand
    fails under 5.17 with "accessing tensor output of CUDAGraphs that has been overwritten"
    (H200, 2026-12-02, both batches). Decode rate: the NEW steps after the first generated
    token of one generate() call (one cache size, so one set of compiles). Where it fails,
    llm_optims.md's option 2 (a StaticCache and a compiled one-token decode function in a
    loop) is measured instead."""
    hf.generation_config.cache_implementation = "static"
    failed = []
    for b in batches:
        ids = torch.as_tensor(rng.integers(0, hf.config.vocab_size, (b, CONTEXT)), device="cuda")
        try:
            def decode_seconds() -> float:
                clock = TokenClock()
                hf.generate(ids, max_new_tokens=NEW + 1, min_new_tokens=NEW + 1,
                            do_sample=False, eos_token_id=None, pad_token_id=0, streamer=clock)
                torch.cuda.synchronize()
                return clock.times[NEW + 1] - clock.times[1]
            for _ in range(2):  # compiles (prefill and decode graphs), then warm
                decode_seconds()
            t = min(decode_seconds() for _ in range(2))
            compiled = getattr(hf, "_compiled_call", None) is not None  # generate's own
            rep.row(name, f"transformers static+compile decode batch {b}", b * NEW / t,
                    "tokens/s", "" if compiled else "generate did not compile: static eager")
        except Exception as exc:  # noqa: BLE001
            rep.row(name, f"transformers static+compile decode batch {b}", None, "tokens/s",
                    f"{type(exc).__name__}: {exc}"[:300])
            failed.append(ids)
    hf.generation_config.cache_implementation = None
    for ids in failed:
        try:
            t = hf_static_loop(torch, hf, ids)
            rep.row(name, f"transformers StaticCache+compiled step, batch {ids.shape[0]}",
                    ids.shape[0] * NEW / t, "tokens/s", "llm_optims.md option 2")
        except Exception as exc:  # noqa: BLE001
            rep.row(name, f"transformers StaticCache+compiled step, batch {ids.shape[0]}",
                    None, "tokens/s", f"{type(exc).__name__}: {exc}"[:300])


def hf_static_loop(torch, hf, ids) -> float:
    """llm_optims.md's option 2: prefill into a StaticCache, then a torch.compile'd
    (reduce-overhead) one-token decode function called per token. Seconds of NEW steps."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from transformers import StaticCache

    def decode_one_token(cur_token, cache_position, past_key_values):
        logits = hf(cur_token, position_ids=None, cache_position=cache_position,
                    past_key_values=past_key_values, return_dict=False, use_cache=True)[0]
        return torch.argmax(logits[:, -1], dim=-1)[:, None]

    step = torch.compile(decode_one_token, mode="reduce-overhead", fullgraph=True)
    b, s = ids.shape
    best = None
    with torch.no_grad():
        for _ in range(3):  # the first run compiles
            try:
                cache = StaticCache(config=hf.config, max_cache_len=s + NEW + 1)
            except TypeError:  # transformers 4's signature
                cache = StaticCache(config=hf.config, max_batch_size=b, max_cache_len=s + NEW + 1,
                                    device="cuda", dtype=torch.bfloat16)
            pos = torch.arange(s, device="cuda")
            logits = hf(ids, cache_position=pos, past_key_values=cache, return_dict=False,
                        use_cache=True)[0]
            nxt = torch.argmax(logits[:, -1], dim=-1)[:, None]
            pos = torch.tensor([s], device="cuda")
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(NEW):
                with sdpa_kernel(SDPBackend.MATH):
                    nxt = step(nxt.clone(), pos, cache)
                pos += 1
            torch.cuda.synchronize()
            t = time.perf_counter() - t0
            best = t if best is None else min(best, t)
    return best


def kernel_rows(rep, name, model, bandwidth, reps, sync, calls=KERNEL_CALLS):
    """The decode GEMV and decode attention in % of copy bandwidth, each as device time in a
    graph (``graph_and_eager``), and eager in us per call (host launch cost included). Call i
    reads the weights or KV cache of layer i mod the layer count, so from DRAM as in a decode
    step: one operand read 100 times (Qwen3-1.7B's gate | up is 50 MB) would partly stay in L2.
    """
    c = model.config
    # (2 * intermediate, hidden): a layer's largest projection
    ws = [layer.gate_up[0] for layer in model.layers]
    x = fl.asarray(np.random.default_rng(0).standard_normal((1, c.hidden_size))
                   .astype(fl.bf16.numpy))
    t, eager = graph_and_eager(lambda i: nn.linear(x, ws[i % len(ws)]), calls, reps, sync)
    w = ws[0]
    rep.row(name, "decode GEMV (linear, T=1)", 100 * w.nbytes / t / bandwidth, "% of copy",
            f"{w.shape[0]}x{w.shape[1]}, {t * 1e6:.1f} us in a graph")
    rep.row(name, "decode GEMV eager, host incl.", eager * 1e6, "us/call")
    b, ctx = 16, CONTEXT + NEW
    cache = model.new_cache(b, ctx)
    q = fl.zeros((b, c.num_heads, c.head_dim), fl.bf16)
    lengths = fl.asarray(np.full(b, ctx, np.int32))
    n = c.num_layers
    t, eager = graph_and_eager(lambda i: nn.decode_attention(q, cache.k[i % n], cache.v[i % n],
                                                             lengths), calls, reps, sync)
    moved = 2 * cache.k[0].nbytes
    rep.row(name, f"decode attention b{b} ctx {ctx}", 100 * moved / t / bandwidth, "% of copy",
            f"{t * 1e6:.1f} us in a graph")
    rep.row(name, "decode attention eager, host incl.", eager * 1e6, "us/call")


def graph_and_eager(call, n: int, reps: int, sync) -> tuple[float, float]:
    """Seconds per ``call(i)`` over i = 0 .. n-1: (in a graph, eager). In a graph: the n calls
    captured once with ``fl.capture()`` (as generate captures its decode step), then the wall
    time of a replay and its sync, best of ``reps``, over n: device time plus the gaps between
    the graph's kernels, with one graph launch and one sync spread over n calls. Eager: the n
    calls from Python, synchronised at the end, best of ``reps``, over n: host launch cost
    included. The first call compiles; one replay before the timed ones uploads the graph."""
    call(0)
    eager = best_time(lambda: [call(i) for i in range(n)], reps, sync) / n
    with fl.capture() as graph:
        for i in range(n):
            call(i)
    try:
        graph.replay()
        return best_time(graph.replay, reps, sync) / n, eager
    finally:
        graph.release()  # it pins the weights and caches it read


# -- driver -------------------------------------------------------------------------------------
def run_gpu(args, rep) -> None:
    import torch
    import transformers
    fl.set_backend("cuda")

    def sync():
        fl.synchronize()
        torch.cuda.synchronize()

    bandwidth = copy_bandwidth(torch)
    if "limit" in args.parts:
        rep.row("-", "copy bandwidth", bandwidth / 1e12, "TB/s")
    for name in args.models:
        rng = np.random.default_rng(0)
        hf = hf_model(torch, transformers, SHAPES[name])
        tensors = dict(hf.state_dict())
        torch.cuda.synchronize()  # the weights are made on torch's stream; fearless reads them
        model = fearless_model(SHAPES[name], tensors)
        limit = bandwidth / weight_bytes(model)
        rep.log(f"== {name}: {model}, {weight_bytes(model) / 1e9:.2f} GB of weights")
        if "limit" in args.parts:
            rep.row(name, "weight-streaming limit, batch 1", limit, "tokens/s")
        parts = [("prefill", lambda: fearless_prefill(rep, name, model, args.reps, sync, rng)),
                 ("decode", lambda: fearless_decode(
                     rep, name, model, args.reps, rng,
                     lambda ids, n: hf_decode(torch, hf, torch.as_tensor(ids, device="cuda"),
                                              n - 1)[0], limit)),
                 ("kernels", lambda: kernel_rows(rep, name, model, bandwidth, args.reps, sync)),
                 ("launches", lambda: launch_rows(rep, name, model,
                                                  fearless_model(SHAPES[name], tensors, False))),
                 ("hf", lambda: hf_parts(rep, name, torch, hf, args.reps, rng)),
                 ("compile", lambda: hf_compiled(rep, name, torch, hf, args.compile_batches,
                                                 rng)),
                 ("profile", lambda: decode_profile(rep, name, model, torch, rng,
                                                    DECODE_BATCHES, CONTEXT, NEW))]
        for part, fn in parts:
            if part in args.parts:
                try:
                    fn()
                except Exception:  # noqa: BLE001 (logged with its traceback; the run goes on)
                    rep.fail(f"{name} {part}")
        model = tensors = hf = parts = None  # the lambdas above hold them too
        torch.cuda.empty_cache()


def run_dry(args, rep) -> None:
    """The fearless parts once on the CPU backend, 2 layers, small sizes."""
    global PREFILL, DECODE_BATCHES, CONTEXT, NEW
    PREFILL, DECODE_BATCHES, CONTEXT, NEW = ((1, 16), (2, 8)), (1, 2), 12, 4
    fl.set_backend("cpu")
    for name in args.models:
        rng = np.random.default_rng(0)
        shape = dict(SHAPES[name], vocab_size=512, hidden_size=128, intermediate_size=256,
                     num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                     head_dim=64)
        config = parse_config(dict(shape, dtype="bfloat16"))
        from tests.models.checkpoint import random_weights
        weights = random_weights(dict(shape, tie_word_embeddings=config.tie_word_embeddings),
                                 rng)
        model = fearless_model(shape, weights)
        rep.log(f"== {name} (dry run): {model}")
        fearless_prefill(rep, name, model, 1, fl.synchronize, rng)
        fearless_decode(rep, name, model, 1, rng)
        kernel_rows(rep, name, model, 1e9, 1, fl.synchronize, calls=4)
        launch_rows(rep, name, model, fearless_model(shape, weights, False))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default=",".join(SHAPES))
    p.add_argument("--parts", default="limit,prefill,decode,kernels,launches,hf,compile")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--compile-batches", default="1")
    p.add_argument("--dry-run", action="store_true")
    args = p.parse_args(argv)
    args.models = [m for m in args.models.split(",") if m]
    unknown = [m for m in args.models if m not in SHAPES]
    if unknown:
        p.error(f"unknown model {unknown[0]!r}; choose from {', '.join(SHAPES)}")
    args.parts = set(args.parts.split(","))
    args.compile_batches = [int(b) for b in args.compile_batches.split(",") if b]
    rep = Report(Path(os.environ.get("OUT", "bench_out")), "bench_llm")
    try:
        (run_dry if args.dry_run else run_gpu)(args, rep)
    finally:
        rep.table()
        rep.save()
    return 1 if rep.data["errors"] else 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/ for the dry run
    sys.exit(main())
