// Quantized matmul over GGML blocks, read straight from the weight's u32 storage buffer (in0;
// x, where a kernel reads one, is in1):
// W (N, K) is N rows of row_bytes bytes, blocks back to back as in a GGUF file (Q4_0 18 bytes,
// Q4_1 20, Q8_0 34, Q4_K 144, Q6_K 210 per block), so a block starts at any even byte: word_at reads
// four bytes from any address. Every type is decoded 32 elements ("a chunk": one Q4_0/Q8_0
// block, one sub-block of a K-quant super-block) at a time into `wv`. Layouts and arithmetic
// as ember.quant's numpy kernels (and core/backends/cuda/quant.cuh).
// prm: [0] M (input rows)  [1] N (output columns)  [2] K  [3] row_bytes
//      [4] qmatvec: x's first element in its buffer; dequant: first weight row
//      [5] qmatvec: out's first element

var<private> wv: array<f32, 32>;

fn word_at(a: u32) -> u32 {
    let s = (a & 3u) * 8u;
    let lo = in0[a >> 2u];
    if (s == 0u) { return lo; }
    return (lo >> s) | (in0[(a >> 2u) + 1u] << (32u - s));  // the buffer carries one spare word
}

fn f16_at(a: u32) -> f32 { return unpack2x16float(word_at(a) & 0xffffu).x; }

fn i8_of(w: u32, j: u32) -> f32 { return f32(bitcast<i32>(w << (24u - 8u * j)) >> 24u); }

// float32 weights (decode_f32): the same matvec over (N, K) rows of f32 words, row_bytes = 4 K
fn decode_f32(row: u32, c: u32) {
    let b = (row >> 2u) + c * 32u;
    for (var i = 0u; i < 32u; i = i + 1u) { wv[i] = bitcast<f32>(in0[b + i]); }
}

// a (K, N) float32 matrix read by columns (decode_f32t: row_bytes = 4, so row / 4 is the column n)
fn decode_f32t(row: u32, c: u32) {
    let n = row >> 2u;
    for (var i = 0u; i < 32u; i = i + 1u) { wv[i] = bitcast<f32>(in0[(c * 32u + i) * prm[1] + n]); }
}

fn byte_at(a: u32) -> u32 { return (in0[a >> 2u] >> ((a & 3u) * 8u)) & 255u; }

// Q8_0: f16 d | 32 int8
fn decode_q8_0(row: u32, c: u32) {
    let b = row + c * 34u;
    let d = f16_at(b);
    for (var i = 0u; i < 8u; i = i + 1u) {
        let w = word_at(b + 2u + 4u * i);
        for (var j = 0u; j < 4u; j = j + 1u) { wv[4u * i + j] = i8_of(w, j) * d; }
    }
}

// Q4_0: f16 d | 16 bytes; element l in the low nibble of byte l, element l + 16 in its high nibble
fn decode_q4_0(row: u32, c: u32) {
    let b = row + c * 18u;
    let d = f16_at(b);
    for (var i = 0u; i < 4u; i = i + 1u) {
        let w = word_at(b + 2u + 4u * i);
        for (var j = 0u; j < 4u; j = j + 1u) {
            let q = (w >> (8u * j)) & 255u;
            wv[4u * i + j] = f32(i32(q & 15u) - 8) * d;
            wv[16u + 4u * i + j] = f32(i32(q >> 4u) - 8) * d;
        }
    }
}

// Q4_1: f16 d | f16 m | 16 bytes; element l in the low nibble of byte l, element l + 16 in its high nibble;
// x = d * q + m
fn decode_q4_1(row: u32, c: u32) {
    let b = row + c * 20u;
    let d = f16_at(b);
    let mn = f16_at(b + 2u);
    for (var i = 0u; i < 4u; i = i + 1u) {
        let w = word_at(b + 4u + 4u * i);
        for (var j = 0u; j < 4u; j = j + 1u) {
            let q = (w >> (8u * j)) & 255u;
            wv[4u * i + j] = f32(q & 15u) * d + mn;
            wv[16u + 4u * i + j] = f32(q >> 4u) * d + mn;
        }
    }
}

// Q4_K: f16 d | f16 dmin | 12 bytes of 6-bit scales and mins | 128 bytes of nibbles; sub-block j
// of 32 sits in the low (j even) or high (j odd) nibbles of bytes 32 * (j / 2) ..
fn decode_q4_k(row: u32, c: u32) {
    let j = c % 8u;
    let b = row + (c / 8u) * 144u;
    let d = f16_at(b);
    let dmin = f16_at(b + 2u);
    let q = b + 4u;
    var sc: u32;
    var mn: u32;
    if (j < 4u) {
        sc = byte_at(q + j) & 63u;
        mn = byte_at(q + j + 4u) & 63u;
    } else {
        sc = (byte_at(q + j + 4u) & 15u) | ((byte_at(q + j - 4u) >> 6u) << 4u);
        mn = (byte_at(q + j + 4u) >> 4u) | ((byte_at(q + j) >> 6u) << 4u);
    }
    let dl = d * f32(sc);
    let ml = dmin * f32(mn);
    let shift = (j & 1u) * 4u;
    let qs = b + 16u + 32u * (j / 2u);
    for (var i = 0u; i < 8u; i = i + 1u) {
        let w = word_at(qs + 4u * i) >> shift;
        for (var k = 0u; k < 4u; k = k + 1u) { wv[4u * i + k] = dl * f32((w >> (8u * k)) & 15u) - ml; }
    }
}

// Q6_K: 128 bytes of low nibbles | 64 bytes of high 2-bit pairs | 16 int8 scales | f16 d;
// sub-block j = 4 * half + quarter
fn decode_q6_k(row: u32, c: u32) {
    let j = c % 8u;
    let h = j / 4u;
    let quarter = j % 4u;
    let b = row + (c / 8u) * 210u;
    let d = f16_at(b + 208u);
    let ql = b + 64u * h + (quarter & 1u) * 32u;
    let nshift = (quarter >> 1u) * 4u;
    let qh = b + 128u + 32u * h;
    let s0 = d * i8_of(byte_at(b + 192u + 8u * h + 2u * quarter), 0u);
    let s1 = d * i8_of(byte_at(b + 193u + 8u * h + 2u * quarter), 0u);
    for (var i = 0u; i < 8u; i = i + 1u) {
        let lo = word_at(ql + 4u * i) >> nshift;
        let hi = word_at(qh + 4u * i) >> (2u * quarter);
        let dl = select(s1, s0, i < 4u);
        for (var k = 0u; k < 4u; k = k + 1u) {
            let v = (((lo >> (8u * k)) & 15u) | (((hi >> (8u * k)) & 3u) << 4u));
            wv[4u * i + k] = dl * f32(i32(v) - 32);
        }
    }
}

//! kernel qmatvec
// Decode shape: out (M, N) = x (M, K) @ W^T for M <= 8. A workgroup of 64 threads serves
// 64 / $TPC output columns; the $TPC threads of a column split K by chunks (each weight chunk
// decoded once, used for all M rows) and sum their partials through shared memory. $TPC 1
// (no barriers) suits CPU-emulated adapters; wider splits suit GPUs (more loads in flight).
// $DECODE names the block decoder above.
// XV (substituted below) defines xv(j), element j of x: in1[j], or a pending elementwise x computed from its leaves
// (fusion.py: SiLU(gate) * up read straight from the gate/up output, never written), or a pending norm
// (norm_prologue.py) whose row statistics PRO computes first in every workgroup (prm[6]: eps bits);
// BIAS: empty, or a linear's bias added to each column (F.linear's, float32 weights)
var<workgroup> part: array<f32, 512>;  // (8 rows, 64 threads)
$XV

fn wg_sum(lid: u32, v: f32) -> f32 {  // the sum of v over the workgroup's 64 threads (uniform control flow)
    part[lid] = v;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s = s >> 1u) {
        if (lid < s) { part[lid] = part[lid] + part[lid + s]; }
        workgroupBarrier();
    }
    let r = part[0];
    workgroupBarrier();
    return r;
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let M = prm[0];
    let N = prm[1];
    let K = prm[2];
    $PRO
    let t = lid % ${TPC}u;
    let n = (wid.y * nwg.x + wid.x) * (64u / ${TPC}u) + lid / ${TPC}u;
    let live = n < N;
    let row = n * prm[3];
    var acc = array<f32, 8>(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    if (live) {
        for (var c = t; c < K / 32u; c = c + ${TPC}u) {
            $DECODE(row, c);
            for (var m = 0u; m < M; m = m + 1u) {
                let xb = prm[4] + m * K + c * 32u;
                var s = 0.0;
                for (var i = 0u; i < 32u; i = i + 4u) {
                    s = s + dot(vec4<f32>(wv[i], wv[i + 1u], wv[i + 2u], wv[i + 3u]),
                                vec4<f32>(xv(xb + i), xv(xb + i + 1u), xv(xb + i + 2u), xv(xb + i + 3u)));
                }
                acc[m] = acc[m] + s;
            }
        }
    }
    if (${TPC}u > 1u) {
        for (var m = 0u; m < 8u; m = m + 1u) { part[m * 64u + lid] = acc[m]; }
        workgroupBarrier();
        for (var st = ${TPC}u / 2u; st > 0u; st = st >> 1u) {
            if (t < st) {
                for (var m = 0u; m < M; m = m + 1u) { part[m * 64u + lid] = part[m * 64u + lid] + part[m * 64u + lid + st]; }
            }
            workgroupBarrier();
        }
        for (var m = 0u; m < 8u; m = m + 1u) { acc[m] = part[m * 64u + lid - t]; }
    }
    if (live) {
        for (var m = t; m < M; m = m + ${TPC}u) { out[prm[5] + m * N + n] = acc[m]${BIAS}; }
    }
}

//! kernel dequant
// Prefill shape: rows prm[4] .. prm[4] + M of W as float32 (M, K), one thread per chunk; the
// backend multiplies the slab with its tiled matmul. prm[0] here counts slab rows.
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let t = flat_id(wid, nwg, lid);
    let chunks = prm[2] / 32u;
    if (t >= prm[0] * chunks) { return; }
    let r = t / chunks;
    let c = t % chunks;
    $DECODE((prm[4] + r) * prm[3], c);
    let o = r * prm[2] + c * 32u;
    for (var i = 0u; i < 32u; i = i + 1u) { out[o + i] = wv[i]; }
}
