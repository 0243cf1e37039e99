"""The compiler: the SIMT and tile pipelines (``pipeline.py``), the facts a compile hands the
runtime (``info.py``) and the entry ABI each backend emits (``abi.py``)."""
from fearless.compiler.pipeline import (  # noqa: F401 (the package's surface)
    SIMT_STAGES, STAGE_NAMES, TILE, TILE_STAGE_NAMES, TILE_STAGES, Compiled, compile_simt,
    compile_tile, show)
