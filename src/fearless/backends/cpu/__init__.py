"""The CPU backend: fearless IR interpreted with NumPy; the reference semantics of every op."""
