"""``fearless.nn``: the kernels a transformer needs, as functions over fearless and torch
tensors (see each module)."""
from fearless.nn.linear import linear  # noqa: F401
