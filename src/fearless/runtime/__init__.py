"""Host runtime: device and backend selection, streams, memory, tensors, interop, launches.

Only this package imports ``cuda.core`` / ``cuda.bindings``.
"""
