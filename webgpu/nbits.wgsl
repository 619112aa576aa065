// The registry's nbits_matmul on webgpu (webgpu/nbits.py): y (M, N) = x (M, K) @ W.T with W in onnxruntime's
// MatMulNBits layout, read as packed bits where it lies: in1 the packed levels as u32 words, row n at word
// n * prm[6] (each block's bits back to back, the first level in the low bits), in2 / in3 the scales and zero
// points (N, blocks) as float32. One workgroup per output element; its 64 threads split K and add up in
// workgroup memory.  prm: [1] M  [2] N  [3] K  [4] blocks  [5] bits  [6] words per row of W  [7] block
var<workgroup> part: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let o = wid.x + wid.y * nwg.x;          // output element, row-major (M, N); the same for the whole group
    let N = prm[2];
    let K = prm[3];
    let blocks = prm[4];
    let bits = prm[5];
    let block = prm[7];
    let mask = (1u << bits) - 1u;
    let live = o < prm[0];
    let m = o / N;
    let n = o % N;
    var acc = 0.0;
    if (live) {
        for (var k = lid; k < K; k = k + 64u) {
            let b = n * blocks + k / block;
            let bit = k * bits;              // bits never straddle a word: 2, 4 or 8 divide 32
            let lv = (in1[n * prm[6] + (bit >> 5u)] >> (bit & 31u)) & mask;
            acc = acc + f32(in0[m * K + k]) * ((f32(lv) - in3[b]) * in2[b]);
        }
    }
    part[lid] = acc;
    workgroupBarrier();
    for (var w = 32u; w > 0u; w = w >> 1u) {
        if (lid < w) { part[lid] = part[lid] + part[lid + w]; }
        workgroupBarrier();
    }
    if (live && lid == 0u) { out[o] = to_out(part[0]); }
}
