// Convolution family: direct N-d (up to 3 spatial dims; 1-d/2-d pad to 3-d with size-1 dims)
// cross-correlation with stride, zero padding, dilation and groups. No im2col buffer, so a
// large image never needs a column matrix over the binding-size limit.
// prm: [0] total outputs [1] N [2] C [3] O [4] groups [5..8) in D,H,W [8..11) out D,H,W
//       [11..14) kernel [14..17) stride [17..20) padding [20..23) dilation

//! kernel conv
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = flat_id(wid, nwg, lid);
    if (i >= prm[0]) { return; }
    let C = prm[2];
    let O = prm[3];
    let cg = C / prm[4];
    let og = O / prm[4];
    let ID = prm[5]; let IH = prm[6]; let IW = prm[7];
    let OD = prm[8]; let OH = prm[9]; let OW = prm[10];
    let KD = prm[11]; let KH = prm[12]; let KW = prm[13];
    var rem = i;
    let ow = rem % OW; rem = rem / OW;
    let oh = rem % OH; rem = rem / OH;
    let od = rem % OD; rem = rem / OD;
    let o = rem % O;
    let n = rem / O;
    let g = o / og;
    var acc = 0.0;
    for (var c = 0u; c < cg; c = c + 1u) {
        let xc = (n * C + g * cg + c) * ID;
        let wc = (o * cg + c) * KD;
        for (var kd = 0u; kd < KD; kd = kd + 1u) {
            let id = i32(od * prm[14] + kd * prm[20]) - i32(prm[17]);
            if (id < 0 || id >= i32(ID)) { continue; }
            for (var kh = 0u; kh < KH; kh = kh + 1u) {
                let ih = i32(oh * prm[15] + kh * prm[21]) - i32(prm[18]);
                if (ih < 0 || ih >= i32(IH)) { continue; }
                let xrow = ((xc + u32(id)) * IH + u32(ih)) * IW;
                let wrow = ((wc + kd) * KH + kh) * KW;
                for (var kw = 0u; kw < KW; kw = kw + 1u) {
                    let iw = i32(ow * prm[16] + kw * prm[22]) - i32(prm[19]);
                    if (iw < 0 || iw >= i32(IW)) { continue; }
                    acc = acc + f32(in0[xrow + u32(iw)]) * f32(in1[wrow + kw]);
                }
            }
        }
    }
    out[i] = $FIX($OT(acc));
}
