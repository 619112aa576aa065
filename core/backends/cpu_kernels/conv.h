// conv.c's parameter block and entry points, shared with conv_winograd.c (its products are a conv.c call), and the
// page's epilogue that both apply to their output rows.
#pragma once
#include <stdint.h>

#include "fvec.h"

// intptr_t parameters, filled by cpu_float_kernels.py. C_GEMM: in the page, gemm.c's scratch for each of the
// threads (ember_sgemm_scratch_floats() each) where its strided convs may run as gemm.c's product, else 0
enum { C_X, C_W, C_B, C_Y, C_SCRATCH, C_N, C_C, C_H, C_W_, C_O, C_KH, C_KW, C_SH, C_SW, C_PH, C_PW, C_DH, C_DW,
       C_GROUPS, C_ACT, C_GEMM, C_FIELDS };

// act(v + b), or act(v) where b is 0: a tile's or an output row's epilogue
static inline fw fw_bias_act(fw v, const float *b, int act) { return fw_act(b ? fw_add(v, fw_splat(*b)) : v, act); }

long ember_conv2d_scratch_floats(const intptr_t *p);
int ember_conv2d(const intptr_t *p);

#if defined(__wasm__)
// In the page a tile's last block leaves its sums in y, then this pass applies the bias (b[r bs] to row r) and the
// activation to its rows (and Winograd's to its output rows' phases): conv.c's ember_conv_epilogue
void ember_conv_epilogue(float *y, long yos, int mr, int width, const float *b, int bs, int act);
#endif
