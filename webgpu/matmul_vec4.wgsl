// Matmul with 16-byte loads (the fast path; matmul.wgsl has the general strided kernels):
// C (batch, M, N) = A (batch, M, K) @ B (batch, K, N); inputs are bound as vec4 arrays.
// prm as in matmul.wgsl (bias too), strides in vec4 units; the bias in2 is bound as scalar words.

struct Mat { off: i32, sb: i32, s0: i32, s1: i32 }

fn mat(base: u32, bt: u32) -> Mat {
    let sb = bitcast<i32>(prm[base + 1u]);
    return Mat(bitcast<i32>(prm[base]) + i32(bt) * sb, sb, bitcast<i32>(prm[base + 2u]), bitcast<i32>(prm[base + 3u]));
}

fn store4x4(bt: u32, m: u32, n: u32, M: u32, N: u32, c: array<vec4<$T>, 4>) {
    for (var i = 0u; i < 4u; i = i + 1u) {
        if (m + i >= M) { return; }
        for (var j = 0u; j < 4u; j = j + 1u) {
            if (n + j < N) { out[(bt * M + m + i) * N + n + j] = $FIX($OT(c[i][j]$BIAS)); }
        }
    }
}

// $L: the type elements are loaded and multiplied in, $T: the accumulators' (as in matmul.wgsl); $DOT: dot
// when they are the same, else dotw (f16 products each widened to f32 before the sum)
fn dotw(a: vec4<$L>, b: vec4<$L>) -> $T {
    let p = vec4<$T>(a * b);
    return (p.x + p.y) + (p.z + p.w);
}

//! kernel matmul_vec4
// 4x4 register blocks with 16-byte loads: A is read along k (contiguous rows), B along n
// ($BK false: row-major B) or along k ($BK true: a transposed weight, as in x @ W^T).
// Needs K and N multiples of 4 and 4-aligned offsets/strides (the backend checks); 4 loads
// of A and 4 of B feed 64 multiply-adds. prm strides here are in vec4 units.
@compute @workgroup_size(8, 8)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) l: vec3<u32>) {
    let M = prm[0];
    let N = prm[1];
    let K4 = prm[2] / 4u;
    let bt = wid.z;
    let a = mat(3u, bt);
    let b = mat(7u, bt);
    let m = (wid.y * 8u + l.y) * 4u;
    let n = (wid.x * 8u + l.x) * 4u;
    if (m >= M || n >= N) { return; }
    // rows past M repeat the last row: computed, never stored
    let r0 = a.off + i32(m) * a.s0;
    let r1 = a.off + i32(min(m + 1u, M - 1u)) * a.s0;
    let r2 = a.off + i32(min(m + 2u, M - 1u)) * a.s0;
    let r3 = a.off + i32(min(m + 3u, M - 1u)) * a.s0;
    var c0 = vec4<$T>($T(0));
    var c1 = vec4<$T>($T(0));
    var c2 = vec4<$T>($T(0));
    var c3 = vec4<$T>($T(0));
    for (var k4 = 0u; k4 < K4; k4 = k4 + 1u) {
        let a0 = vec4<$L>(in0[r0 + i32(k4)]);
        let a1 = vec4<$L>(in0[r1 + i32(k4)]);
        let a2 = vec4<$L>(in0[r2 + i32(k4)]);
        let a3 = vec4<$L>(in0[r3 + i32(k4)]);
        if ($BK) {
            // b.s1 = stride between columns n (vec4 units), k contiguous
            let p = b.off + i32(n) * b.s1 + i32(k4);
            let b0 = vec4<$L>(in1[p]);
            let b1 = vec4<$L>(in1[p + b.s1]);
            let b2 = vec4<$L>(in1[p + 2 * b.s1]);
            let b3 = vec4<$L>(in1[p + 3 * b.s1]);
            c0 = c0 + vec4<$T>($DOT(a0, b0), $DOT(a0, b1), $DOT(a0, b2), $DOT(a0, b3));
            c1 = c1 + vec4<$T>($DOT(a1, b0), $DOT(a1, b1), $DOT(a1, b2), $DOT(a1, b3));
            c2 = c2 + vec4<$T>($DOT(a2, b0), $DOT(a2, b1), $DOT(a2, b2), $DOT(a2, b3));
            c3 = c3 + vec4<$T>($DOT(a3, b0), $DOT(a3, b1), $DOT(a3, b2), $DOT(a3, b3));
        } else {
            // b.s0 = stride between rows k (vec4 units), n contiguous
            let p = b.off + i32(k4 * 4u) * b.s0 + i32(n / 4u);
            let b0 = vec4<$L>(in1[p]);
            let b1 = vec4<$L>(in1[p + b.s0]);
            let b2 = vec4<$L>(in1[p + 2 * b.s0]);
            let b3 = vec4<$L>(in1[p + 3 * b.s0]);
            c0 = c0 + vec4<$T>(a0.x * b0) + vec4<$T>(a0.y * b1) + vec4<$T>(a0.z * b2) + vec4<$T>(a0.w * b3);
            c1 = c1 + vec4<$T>(a1.x * b0) + vec4<$T>(a1.y * b1) + vec4<$T>(a1.z * b2) + vec4<$T>(a1.w * b3);
            c2 = c2 + vec4<$T>(a2.x * b0) + vec4<$T>(a2.y * b1) + vec4<$T>(a2.z * b2) + vec4<$T>(a2.w * b3);
            c3 = c3 + vec4<$T>(a3.x * b0) + vec4<$T>(a3.y * b1) + vec4<$T>(a3.z * b2) + vec4<$T>(a3.w * b3);
        }
    }
    store4x4(bt, m, n, M, N, array<vec4<$T>, 4>(c0, c1, c2, c3));
}
