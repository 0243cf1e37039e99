"""tests/models needs all of fearless.nn (several branches of issue 12 until they are merged):
while a function the models call is missing, these tests are not collected, so this branch's
suite stays runnable on its own."""
import importlib

NEEDED = ("rms_norm", "rope", "rope_tables", "silu_mul", "embedding", "argmax", "linear",
          "kv_cache_write", "attention", "decode_attention")

try:
    _nn = importlib.import_module("fearless.nn")
except ImportError:
    _nn = None
collect_ignore_glob = [] if _nn is not None and all(hasattr(_nn, n) for n in NEEDED) \
    else ["test_*.py"]
