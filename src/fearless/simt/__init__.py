"""The user-facing surface of the SIMT track: parameter kinds, thread indices, safety switches.

Everything here is a *stub*: the compiler recognises these objects inside a kernel and emits IR
for them; called on the host, the intrinsics raise a clear error instead (``stub.py``).
``views.py`` is what a static type checker sees of the language.
"""
