"""``fearless.nn``: the kernels a transformer needs, as functions over fearless and torch tensors."""
from fearless.nn.attention import attention, decode_attention
