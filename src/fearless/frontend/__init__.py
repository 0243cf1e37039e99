"""Frontend: Python source -> typed fearless IR, with diagnostics that point at user code."""
