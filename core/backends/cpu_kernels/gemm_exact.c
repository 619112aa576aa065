// gemm.c with its multiply-add never fused, whatever the build: ember_sgemm_batched_exact. The pool's relaxed-SIMD
// module runs deterministic mode's products with it (cpu_matmul.mm, cpu_pool_kernels.py), giving the plain module's
// bits (and the desktop's page kernels') on the pool's threads; in the plain module it is the same code twice.
#define GEMM_EXACT
#include "gemm.c"
