"""fearless's version: the one place it is written (pyproject.toml reads it; the disk cache keys
include it, so a new release never loads an older one's compiles)."""
__version__ = "0.1.0"
