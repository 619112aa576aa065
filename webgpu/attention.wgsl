// The registry's flash_attention and flash_attention_split kernel on webgpu (webgpu/fused.py), run through
// custom_kernel (which prepends the bindings and helpers). Fused attention, one kernel: out = softmax(q k^T * scale + mask) v with an online softmax over blocks
// of 64 keys (flash-attention style), so the (L, S) scores never reach memory. One workgroup per
// (batch, query row); its 64 threads score one key each per block, then each accumulates up to 4 of
// the Dv output columns, rescaled whenever the running maximum grows. Batch = (B1, B2) of strided views.
// Split keys (flash-decoding, flag 4): for few query rows and many keys, the keys are cut into chunks, one
// workgroup per (query row, batch, chunk), each writing its unnormalized output row with its running
// maximum and sum; a second kernel (fused_ops._COMBINE_WGSL) merges the chunks.
// prm: [0] output elements  [1] L  [2] S  [3] D  [4] Dv  [5] scale bits  [6] flags (1 mask, 2 causal: key
//      s <= query l, 4 split)  [7] B2  [8..12] q offset, B1, B2, row, column strides  [13..17] k  [18..22] v
//      [23..27] mask (i32 bits)  [28] keys per chunk (a multiple of 64; S unsplit)  [29] chunks
// in0 q, in1 k, in2 v, in3 mask (float, additive); out (B1 * B2, L, Dv) contiguous, or split:
// (B1 * B2, L, chunks, Dv + 2) f32 rows of acc[0..Dv), max, sum. D, Dv <= 256.
// q.k and p.v products are in L0 (f16 for float16 with f16 compute: q kept in f16, k, v and the
// probabilities p read as f16), each widened into an f32 dot/accumulator; the softmax statistics are f32.

var<workgroup> qs: array<L0, 256>;
var<workgroup> p: array<f32, 64>;
var<workgroup> stat: array<f32, 2>;  // block max, correction factor

fn at(base: u32, b: u32, r: u32, c: u32) -> i32 {
    let b2 = prm[7];
    return bitcast<i32>(prm[base]) + i32(b / b2) * bitcast<i32>(prm[base + 1u]) + i32(b % b2) * bitcast<i32>(prm[base + 2u])
        + i32(r) * bitcast<i32>(prm[base + 3u]) + i32(c) * bitcast<i32>(prm[base + 4u]);
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let L = prm[1];
    let S = prm[2];
    let D = prm[3];
    let Dv = prm[4];
    let scale = bitcast<f32>(prm[5]);
    let flags = prm[6];
    let l = wid.x;
    let b = wid.y;
    let part = wid.z;       // the key chunk
    let chunk = prm[28];
    for (var d = t; d < D; d = d + 64u) { qs[d] = L0(in0[at(8u, b, l, d)]); }
    var acc = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
    var m = -f_inf();   // running maximum (the same in every thread)
    var sum = 0.0;      // running sum of exp(score - m)
    var stop = S;
    if ((flags & 2u) != 0u) { stop = min(S, l + 1u); }
    stop = min(stop, (part + 1u) * chunk);
    workgroupBarrier();
    for (var s0 = part * chunk; s0 < stop; s0 = s0 + 64u) {
        let s = s0 + t;
        var z = -f_inf();
        if (s < stop) {
            var dotv = 0.0;
            let kr = at(13u, b, s, 0u);             // key row s; then column steps
            let kc = bitcast<i32>(prm[17]);
            for (var d = 0u; d < D; d = d + 1u) { dotv = dotv + f32(qs[d] * L0(in1[kr + i32(d) * kc])); }
            z = dotv * scale;
            if ((flags & 1u) != 0u) { z = z + f32(in3[at(23u, b, l, s)]); }
        }
        p[t] = z;
        workgroupBarrier();
        if (t == 0u) {
            var bm = m;
            for (var j = 0u; j < 64u; j = j + 1u) { bm = max(bm, p[j]); }
            stat[0] = bm;
            stat[1] = select(exp(m - bm), 1.0, bm == -f_inf());
        }
        workgroupBarrier();
        let nm = stat[0];
        let corr = stat[1];
        let e = select(exp(z - nm), 0.0, z == -f_inf());
        workgroupBarrier();
        p[t] = e;
        workgroupBarrier();
        var bs = 0.0;
        for (var j = 0u; j < 64u; j = j + 1u) { bs = bs + p[j]; }
        sum = sum * corr + bs;
        m = nm;
        let n = min(64u, stop - s0);
        for (var i = 0u; i < 4u; i = i + 1u) {
            let c = t + 64u * i;
            if (c < Dv) {
                var a = acc[i] * corr;
                let vr = at(18u, b, s0, c);         // value row s0, column c; then row steps
                let vs = bitcast<i32>(prm[21]);
                for (var j = 0u; j < n; j = j + 1u) { a = a + f32(L0(p[j]) * L0(in2[vr + i32(j) * vs])); }
                acc[i] = a;
            }
        }
        workgroupBarrier();
    }
    if ((flags & 4u) != 0u) {
        let row = ((b * L + l) * prm[29] + part) * (Dv + 2u);
        for (var i = 0u; i < 4u; i = i + 1u) {
            let c = t + 64u * i;
            if (c < Dv) { out[row + c] = to_out(acc[i]); }
        }
        if (t == 0u) {
            out[row + Dv] = to_out(m);
            out[row + Dv + 1u] = to_out(sum);
        }
        return;
    }
    for (var i = 0u; i < 4u; i = i + 1u) {
        let c = t + 64u * i;
        if (c < Dv) { out[(b * L + l) * Dv + c] = to_out(acc[i] / sum); }
    }
}
