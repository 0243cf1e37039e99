"""Self-checking fearless examples; ``fearless demo`` runs them all. Each module has ``run()``."""

NAMES = ("vector_add", "saxpy", "matrix_add", "generic_map", "image_filter",
         "tile_vector_add", "tile_softmax", "tile_layernorm", "tile_gemm", "tile_simt_chain",
         "block_reduce", "histogram", "row_softmax", "transpose", "sgemm", "prefix_sum", "hgemm",
         "tile_attention", "generate")
