"""The LLVM backend: SIMT IR -> LLVM IR (llvmlite) -> PTX. The only package importing llvmlite."""
