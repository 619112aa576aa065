// Matmul family: C (batch, M, N) = A (batch, M, K) @ B (batch, K, N) with arbitrary strides, so
// transposed weights and broadcast batches need no copy.
// prm: [0] M [1] N [2] K [3] a_off [4] a_sb [5] a_sm [6] a_sk [7] b_off [8] b_sb [9] b_sk [10] b_sn
// [11] bias offset: with a bias (F.linear), $BIAS adds in2[prm[11] + column] to the accumulator before
// the one rounding of the store, so `x @ W^T + b` is one dispatch (empty $BIAS: plain matmul, no in2)

struct Mat { off: i32, sb: i32, s0: i32, s1: i32 }

fn mat(base: u32, bt: u32) -> Mat {
    let sb = bitcast<i32>(prm[base + 1u]);
    return Mat(bitcast<i32>(prm[base]) + i32(bt) * sb, sb, bitcast<i32>(prm[base + 2u]), bitcast<i32>(prm[base + 3u]));
}

// $L: the type elements are loaded, tiled and multiplied in; $T: the accumulators' (f16 words with f16
// compute: f16 loads, tiles and products, each product widened to an f32 accumulator; else both f32)
// the 4 elements (m..m+3, k) of A or (k, n..n+3) of B, zero outside the matrix; unrolled
// with masks instead of branches so CPU-emulated adapters keep the lanes vectorised
// (reads past the matrix stay inside the buffer or are clamped by WebGPU's robust access)
fn a4(a: Mat, m: u32, k: u32, M: u32, K: u32) -> vec4<$L> {
    let p = a.off + i32(m) * a.s0 + i32(k) * a.s1;
    let v = vec4<$L>($L(in0[p]), $L(in0[p + a.s0]), $L(in0[p + 2 * a.s0]), $L(in0[p + 3 * a.s0]));
    let ok = vec4<bool>(m < M, m + 1u < M, m + 2u < M, m + 3u < M) & vec4<bool>(k < K);
    return select(vec4<$L>($L(0)), v, ok);
}
fn b4(b: Mat, k: u32, n: u32, K: u32, N: u32) -> vec4<$L> {
    let p = b.off + i32(k) * b.s0 + i32(n) * b.s1;
    let v = vec4<$L>($L(in1[p]), $L(in1[p + b.s1]), $L(in1[p + 2 * b.s1]), $L(in1[p + 3 * b.s1]));
    let ok = vec4<bool>(n < N, n + 1u < N, n + 2u < N, n + 3u < N) & vec4<bool>(k < K);
    return select(vec4<$L>($L(0)), v, ok);
}

fn store4x4(bt: u32, m: u32, n: u32, M: u32, N: u32, c: array<vec4<$T>, 4>) {
    for (var i = 0u; i < 4u; i = i + 1u) {
        if (m + i >= M) { return; }
        for (var j = 0u; j < 4u; j = j + 1u) {
            if (n + j < N) { out[(bt * M + m + i) * N + n + j] = $FIX($OT(c[i][j]$BIAS)); }
        }
    }
}

//! kernel matmul_tiled
// 64x64 output tile per workgroup of 16x16 invocations, each a 4x4 register block (vec4
// rows); K in steps of 16 through shared memory: the layout that is fast on real GPUs
var<workgroup> As: array<vec4<$L>, 256>;  // [k][m / 4]: 4 rows of A at one k
var<workgroup> Bs: array<vec4<$L>, 256>;  // [k][n / 4]: 4 columns of B at one k
@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) l: vec3<u32>) {
    let M = prm[0];
    let N = prm[1];
    let K = prm[2];
    let bt = wid.z;
    let a = mat(3u, bt);
    let b = mat(7u, bt);
    let row0 = wid.y * 64u;
    let col0 = wid.x * 64u;
    let lid = l.y * 16u + l.x;
    var c0 = vec4<$T>($T(0));
    var c1 = vec4<$T>($T(0));
    var c2 = vec4<$T>($T(0));
    var c3 = vec4<$T>($T(0));
    for (var k0 = 0u; k0 < K; k0 = k0 + 16u) {
        As[(lid % 16u) * 16u + lid / 16u] = a4(a, row0 + (lid / 16u) * 4u, k0 + lid % 16u, M, K);
        Bs[lid] = b4(b, k0 + lid / 16u, col0 + (lid % 16u) * 4u, K, N);
        workgroupBarrier();
        for (var kk = 0u; kk < 16u; kk = kk + 1u) {
            let av = As[kk * 16u + l.y];
            let bv = Bs[kk * 16u + l.x];
            c0 = c0 + vec4<$T>(av.x * bv);
            c1 = c1 + vec4<$T>(av.y * bv);
            c2 = c2 + vec4<$T>(av.z * bv);
            c3 = c3 + vec4<$T>(av.w * bv);
        }
        workgroupBarrier();
    }
    store4x4(bt, row0 + l.y * 4u, col0 + l.x * 4u, M, N, array<vec4<$T>, 4>(c0, c1, c2, c3));
}

//! kernel matmul_regs
// the same 4x4 register blocks straight from memory, no shared memory or barriers: on
// CPU-emulated adapters (lavapipe, SwiftShader) barriers cost more than the reuse saves
@compute @workgroup_size(8, 8)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) l: vec3<u32>) {
    let M = prm[0];
    let N = prm[1];
    let K = prm[2];
    let bt = wid.z;
    let a = mat(3u, bt);
    let b = mat(7u, bt);
    let m = (wid.y * 8u + l.y) * 4u;
    let n = (wid.x * 8u + l.x) * 4u;
    if (m >= M || n >= N) { return; }
    var c0 = vec4<$T>($T(0));
    var c1 = vec4<$T>($T(0));
    var c2 = vec4<$T>($T(0));
    var c3 = vec4<$T>($T(0));
    for (var k = 0u; k < K; k = k + 1u) {
        let av = a4(a, m, k, M, K);
        let bv = b4(b, k, n, K, N);
        c0 = c0 + vec4<$T>(av.x * bv);
        c1 = c1 + vec4<$T>(av.y * bv);
        c2 = c2 + vec4<$T>(av.z * bv);
        c3 = c3 + vec4<$T>(av.w * bv);
    }
    store4x4(bt, m, n, M, N, array<vec4<$T>, 4>(c0, c1, c2, c3));
}

