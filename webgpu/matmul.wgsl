// Matmul family: C (batch, M, N) = A (batch, M, K) @ B (batch, K, N) with arbitrary strides, so
// transposed weights and broadcast batches need no copy.
// prm: [0] M [1] N [2] K [3] a_off [4] a_sb [5] a_sm [6] a_sk [7] b_off [8] b_sb [9] b_sk [10] b_sn

fn a_at(b: u32, m: u32, k: u32) -> $T {
    return $T(in0[bitcast<i32>(prm[3]) + i32(b) * bitcast<i32>(prm[4]) + i32(m) * bitcast<i32>(prm[5])
                  + i32(k) * bitcast<i32>(prm[6])]);
}
fn b_at(b: u32, k: u32, n: u32) -> $T {
    return $T(in1[bitcast<i32>(prm[7]) + i32(b) * bitcast<i32>(prm[8]) + i32(k) * bitcast<i32>(prm[9])
                  + i32(n) * bitcast<i32>(prm[10])]);
}

//! kernel matmul_tiled
// 64x64 output tile per workgroup, 4x4 register block per invocation, K in steps of 16
// through shared memory: fast on real GPUs
var<workgroup> As: array<$T, 1024>;  // [k][m]
var<workgroup> Bs: array<$T, 1024>;  // [k][n]
@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) l: vec3<u32>) {
    let M = prm[0];
    let N = prm[1];
    let K = prm[2];
    let bt = wid.z;
    let row0 = wid.y * 64u;
    let col0 = wid.x * 64u;
    let lid = l.y * 16u + l.x;
    var acc: array<$T, 16>;
    for (var i = 0u; i < 16u; i = i + 1u) { acc[i] = $T(0); }
    for (var k0 = 0u; k0 < K; k0 = k0 + 16u) {
        for (var e = lid; e < 1024u; e = e + 256u) {
            let am = e / 16u;
            let ak = e % 16u;
            var av = $T(0);
            if (row0 + am < M && k0 + ak < K) { av = a_at(bt, row0 + am, k0 + ak); }
            As[ak * 64u + am] = av;
            let bk = e / 64u;
            let bn = e % 64u;
            var bv = $T(0);
            if (k0 + bk < K && col0 + bn < N) { bv = b_at(bt, k0 + bk, col0 + bn); }
            Bs[bk * 64u + bn] = bv;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < 16u; kk = kk + 1u) {
            var av: array<$T, 4>;
            var bv: array<$T, 4>;
            for (var i = 0u; i < 4u; i = i + 1u) {
                av[i] = As[kk * 64u + l.y + 16u * i];
                bv[i] = Bs[kk * 64u + l.x + 16u * i];
            }
            for (var i = 0u; i < 4u; i = i + 1u) {
                for (var j = 0u; j < 4u; j = j + 1u) {
                    acc[i * 4u + j] = acc[i * 4u + j] + av[i] * bv[j];
                }
            }
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < 4u; i = i + 1u) {
        let m = row0 + l.y + 16u * i;
        for (var j = 0u; j < 4u; j = j + 1u) {
            let n = col0 + l.x + 16u * j;
            if (m < M && n < N) { out[(bt * M + m) * N + n] = $FIX($OT(acc[i * 4u + j])); }
        }
    }
}

//! kernel matmul_rows
// no shared memory: each invocation computes 4 adjacent outputs of one row straight from
// memory; on CPU-emulated adapters (lavapipe, SwiftShader) barriers cost more than they save
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let M = prm[0];
    let N = prm[1];
    let K = prm[2];
    let bt = wid.z;
    let m = wid.y;
    let n0 = (wid.x * 64u + lid) * 4u;
    if (n0 >= N) { return; }
    var acc = vec4<$T>($T(0));
    let n1 = min(n0 + 1u, N - 1u);
    let n2 = min(n0 + 2u, N - 1u);
    let n3 = min(n0 + 3u, N - 1u);
    for (var k = 0u; k < K; k = k + 1u) {
        let a = a_at(bt, m, k);
        acc = acc + a * vec4<$T>(b_at(bt, k, n0), b_at(bt, k, n1), b_at(bt, k, n2), b_at(bt, k, n3));
    }
    let base = (bt * M + m) * N;
    for (var j = 0u; j < 4u; j = j + 1u) {
        if (n0 + j < N) { out[base + n0 + j] = $FIX($OT(acc[j])); }
    }
}
