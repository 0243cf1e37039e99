"""The body of ``fearless generate PATH --prompt-ids 1,2,3 --max-new-tokens 64`` (the command
line itself is parsed in fearless/cli.py): load the checkpoint, generate greedily, print the
tokens and the prefill and decode tokens/s."""
from __future__ import annotations

from fearless.errors import ModelInputError
from fearless.models.generate import default_max_ctx
from fearless.models.model import load


def run(path: str, prompt: list[int], max_new_tokens: int, batch: int = 1,
        dtype: str | None = None) -> int:
    """Print the model, one line of comma-separated new tokens per sequence (``batch`` copies
    of ``prompt``), then the prefill and decode rates. CheckpointError and ModelInputError
    propagate (the CLI prints them; exit status 1)."""
    if batch < 1:
        raise ModelInputError(f"--batch {batch}: expected at least 1")
    model = load(path, dtype)
    prompts = [prompt] * batch
    # a short run first compiles every kernel and captures the decode step (same cache size),
    # so the rates printed are those of the run that follows
    ctx = default_max_ctx(model, len(prompt), max_new_tokens)
    model.generate(prompts, min(max_new_tokens, 3), max_ctx=ctx)
    tokens = model.generate(prompts, max_new_tokens, max_ctx=ctx)
    print(model)
    for row in tokens:
        print(",".join(str(int(t)) for t in row))
    t = model.timing
    print(f"prefill: {t['prefill_tokens']} tokens in {t['prefill_s'] * 1e3:.1f} ms, "
          f"{_rate(t['prefill_tokens'], t['prefill_s'])} tokens/s")
    print(f"decode: {t['decode_tokens']} tokens in {t['decode_s'] * 1e3:.1f} ms, "
          f"{_rate(t['decode_tokens'], t['decode_s'])} tokens/s")
    return 0


def _rate(n: int, seconds: float) -> str:
    return f"{n / seconds:.1f}" if seconds > 0 and n else "-"
