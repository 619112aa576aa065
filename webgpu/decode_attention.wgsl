// The registry's rope_append_attention kernel on webgpu (webgpu/fused.py, run through custom_kernel): one decoded token's
// attention in one dispatch. From the fused q|k|v projection of the token it rotates q and k (x @ R, R the
// step's (D, D) rotation matrix: any rope layout, partial rotary, scaling), writes the rotated k row and the
// v row into the preallocated cache at `slot` (in place), and attends over the cache's first S rows with an
// online softmax in blocks of 64 keys. The key at `slot` is read from workgroup memory, not from the cache:
// the workgroup that writes it (g == 0) runs beside the others, which never read that row from memory.
// One workgroup per (batch, kv head, query head g of the G sharing it); 64 threads.
// prm: [0] output elements [1] H [2] K (kv heads) [3] G = H / K [4] D [5] S [6] slot [7] scale bits
//      [8] flags (1: mask) [9..12] qkv offset, batch, head, column strides ((B, 1, H + 2K, D) view)
//      [13..17] k cache offset, batch, head, row, column strides [18..22] v cache [23..27] mask
//      ((B, K, G, S) view) offset, batch, kv head, query head, key strides
// in0 qkv, in1 R (D, D) contiguous, in2 k cache (B, K, cap, D), in3 v cache (written), in4 mask (additive)
// out (B, K, G, D) contiguous. D <= 256.

var<workgroup> raw: array<f32, 256>;   // the row being rotated
var<workgroup> qr: array<f32, 256>;    // q, rotated
var<workgroup> kr: array<f32, 256>;    // this token's k, rotated
var<workgroup> vr: array<f32, 256>;    // this token's v
var<workgroup> w: array<f32, 64>;      // a block's scores, then their exponentials
var<workgroup> blk: array<f32, 2>;     // block maximum, rescale factor

fn word(base: u32, i: u32) -> i32 { return bitcast<i32>(prm[base + i]); }

fn qkv_at(b: u32, head: u32, d: u32) -> u32 {
    return u32(word(9u, 0u) + i32(b) * word(9u, 1u) + i32(head) * word(9u, 2u) + i32(d) * word(9u, 3u));
}

fn cache_at(base: u32, b: u32, kh: u32, s: u32, d: u32) -> u32 {
    return u32(word(base, 0u) + i32(b) * word(base, 1u) + i32(kh) * word(base, 2u) + i32(s) * word(base, 3u)
               + i32(d) * word(base, 4u));
}

fn rotated(d: u32, D: u32) -> f32 {  // (raw @ R)[d]
    var r = 0.0;
    for (var e = 0u; e < D; e = e + 1u) { r = r + raw[e] * f32(in1[e * D + d]); }
    return r;
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let H = prm[1];
    let K = prm[2];
    let G = prm[3];
    let D = prm[4];
    let S = prm[5];
    let slot = prm[6];
    let scale = bitcast<f32>(prm[7]);
    let g = wid.x;
    let b = wid.y / K;
    let kh = wid.y % K;
    for (var d = t; d < D; d = d + 64u) { raw[d] = f32(in0[qkv_at(b, kh * G + g, d)]); }
    workgroupBarrier();
    for (var d = t; d < D; d = d + 64u) { qr[d] = rotated(d, D); }
    workgroupBarrier();
    for (var d = t; d < D; d = d + 64u) {
        raw[d] = f32(in0[qkv_at(b, H + kh, d)]);
        vr[d] = f32(in0[qkv_at(b, H + K + kh, d)]);
    }
    workgroupBarrier();
    for (var d = t; d < D; d = d + 64u) {
        kr[d] = rotated(d, D);
        if (g == 0u) {
            in2[cache_at(13u, b, kh, slot, d)] = T2(kr[d]);
            in3[cache_at(18u, b, kh, slot, d)] = T3(vr[d]);
        }
    }
    workgroupBarrier();
    var acc = array<f32, 4>(0.0, 0.0, 0.0, 0.0);  // output columns t, t + 64, t + 128, t + 192
    var run_max = -f_inf();
    var run_sum = 0.0;
    let mbase = word(23u, 0u) + i32(b) * word(23u, 1u) + i32(kh) * word(23u, 2u) + i32(g) * word(23u, 3u);
    for (var s0 = 0u; s0 < S; s0 = s0 + 64u) {
        let s = s0 + t;
        var z = -f_inf();
        if (s < S) {
            var dotv = 0.0;
            if (s == slot) {
                for (var d = 0u; d < D; d = d + 1u) { dotv = dotv + qr[d] * kr[d]; }
            } else {
                for (var d = 0u; d < D; d = d + 1u) { dotv = dotv + qr[d] * f32(in2[cache_at(13u, b, kh, s, d)]); }
            }
            z = dotv * scale;
            if ((prm[8] & 1u) != 0u) { z = z + f32(in4[mbase + i32(s) * word(23u, 4u)]); }
        }
        w[t] = z;
        workgroupBarrier();
        if (t == 0u) {
            var bm = run_max;
            for (var j = 0u; j < 64u; j = j + 1u) { bm = max(bm, w[j]); }
            blk[0] = bm;
            blk[1] = select(exp(run_max - bm), 1.0, bm == -f_inf());
        }
        workgroupBarrier();
        let e = select(exp(z - blk[0]), 0.0, z == -f_inf());
        let corr = blk[1];
        run_max = blk[0];
        workgroupBarrier();
        w[t] = e;
        workgroupBarrier();
        var bsum = 0.0;
        for (var j = 0u; j < 64u; j = j + 1u) { bsum = bsum + w[j]; }
        run_sum = run_sum * corr + bsum;
        let n = min(64u, S - s0);
        for (var i = 0u; i < 4u; i = i + 1u) {
            let c = t + 64u * i;
            if (c < D) {
                var a = acc[i] * corr;
                for (var j = 0u; j < n; j = j + 1u) {
                    let vj = select(f32(in3[cache_at(18u, b, kh, s0 + j, c)]), vr[c], s0 + j == slot);
                    a = a + w[j] * vj;
                }
                acc[i] = a;
            }
        }
        workgroupBarrier();
    }
    let o = ((b * K + kh) * G + g) * D;
    for (var i = 0u; i < 4u; i = i + 1u) {
        let c = t + 64u * i;
        if (c < D) { out[o + c] = to_out(acc[i] / run_sum); }
    }
}
