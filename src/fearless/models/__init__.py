"""fearless.models: Hugging Face causal LMs (Llama, Qwen3) served by fearless.nn's kernels.

    model = fearless.models.load("path/to/checkpoint")       # config.json + *.safetensors
    logits = model.forward([[1, 2, 3]])                       # (1, 3, vocab), model dtype
    tokens = model.generate([[1, 2, 3]], max_new_tokens=32)   # int32 (1, 32), greedy

``config.py`` reads config.json, ``weights.py`` the safetensors files, ``model.py`` runs the
network, ``generate.py`` the prefill + captured decode loop, ``kernels.py`` holds the loop's small
SIMT kernels and ``cli.py`` the ``fearless generate`` command. Needs the ``safetensors``
package (``pip install 'fearless[models]'``).
"""
from fearless.models.config import ModelConfig
from fearless.models.model import CausalLM, load

__all__ = ["load", "CausalLM", "ModelConfig"]
