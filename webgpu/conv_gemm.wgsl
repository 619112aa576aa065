// Implicit-GEMM convolution's column matrix: for images n0.. and output positions p0..p0+P, the
// receptive fields as rows of a (G, cg * KD * KH * KW, P) matrix per image (zeros where the window
// hangs over the padding), so the tiled matmul multiplies each group's (og, R) weight by it.
// prm: [0] total [1] n0 [2] C [3] G [4] cg [5] R = cg*KD*KH*KW [6] P [7] p0
//      [8..11) in D,H,W [11..14) out D,H,W [14..17) kernel [17..20) stride [20..23) padding [23..26) dilation

//! kernel im2col
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let t = flat_id(wid, nwg, lid);
    if (t >= prm[0]) { return; }
    let P = prm[6]; let R = prm[5]; let G = prm[3];
    let p = t % P;
    var rem = t / P;
    let r = rem % R;
    rem = rem / R;
    let g = rem % G;
    let n = rem / G + prm[1];
    let ID = prm[8]; let IH = prm[9]; let IW = prm[10];
    let OH = prm[12]; let OW = prm[13];
    let KD = prm[14]; let KH = prm[15]; let KW = prm[16];
    var q = p + prm[7];
    let ow = q % OW; q = q / OW;
    let oh = q % OH;
    let od = q / OH;
    var s = r;
    let kw = s % KW; s = s / KW;
    let kh = s % KH; s = s / KH;
    let kd = s % KD;
    let c = s / KD;
    let id = i32(od * prm[17] + kd * prm[23]) - i32(prm[20]);
    let ih = i32(oh * prm[18] + kh * prm[24]) - i32(prm[21]);
    let iw = i32(ow * prm[19] + kw * prm[25]) - i32(prm[22]);
    var v = 0.0;
    if (id >= 0 && id < i32(ID) && ih >= 0 && ih < i32(IH) && iw >= 0 && iw < i32(IW)) {
        v = f32(in0[(((n * prm[2] + g * prm[4] + c) * ID + u32(id)) * IH + u32(ih)) * IW + u32(iw)]);
    }
    out[t] = $OT(v);
}
