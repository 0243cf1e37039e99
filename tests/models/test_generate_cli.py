"""``fearless generate`` on a tiny checkpoint: the tokens it prints are model.generate's, the
rates are printed, and bad input exits with one error line."""
from __future__ import annotations

import re

import pytest

pytest.importorskip("safetensors")

from fearless.cli import main  # noqa: E402
from fearless.models import load  # noqa: E402
from tests.models.checkpoint import tiny_checkpoint  # noqa: E402


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_generate_prints_tokens_and_rates(tmp_path, capsys, family):
    path, _, _ = tiny_checkpoint(tmp_path, family, seed=2)
    assert main(["generate", str(path), "--prompt-ids", "5,17,3,9,1", "--max-new-tokens", "6",
                 "--batch", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    want = load(path).generate([[5, 17, 3, 9, 1]] * 2, 6)
    assert out[0].startswith("<CausalLM ")
    assert out[1:3] == [",".join(str(t) for t in row) for row in want]
    assert re.fullmatch(r"prefill: 10 tokens in [\d.]+ ms, [\d.]+ tokens/s", out[3])
    assert re.fullmatch(r"decode: 10 tokens in [\d.]+ ms, [\d.]+ tokens/s", out[4])


@pytest.mark.parametrize("args, status, message", [
    (["--prompt-ids", "1,x"], 2, "--prompt-ids '1,x': expected integers"),
    (["--prompt-ids", ","], 2, "needs at least one token id"),
    (["--prompt-ids", "1,999"], 1, r"prompt_ids\[0, 1\] = 999 is outside the vocabulary"),
    (["--prompt-ids", "1", "--max-new-tokens", "500"], 1, "KV cache holds"),
    (["--prompt-ids", "1", "--batch", "0"], 1, "--batch 0"),
])
def test_generate_bad_input(tmp_path, capsys, args, status, message):
    path, _, _ = tiny_checkpoint(tmp_path, "qwen3")
    assert main(["generate", str(path)] + args) == status
    err = capsys.readouterr().err
    assert re.search(message, err) and err.startswith("error: ") and "Traceback" not in err


def test_generate_other_architecture(tmp_path, capsys):
    path, config, weights = tiny_checkpoint(tmp_path, "llama")
    (path / "config.json").write_text((path / "config.json").read_text().replace(
        "LlamaForCausalLM", "GPT2LMHeadModel"))
    assert main(["generate", str(path), "--prompt-ids", "1"]) == 1
    assert "architecture 'GPT2LMHeadModel' is not supported" in capsys.readouterr().err
