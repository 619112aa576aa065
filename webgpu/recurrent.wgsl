// The registry's lstm_cell and gru_cell on webgpu (webgpu/fused.py): one time step of an LSTM (gates i f g o) or a
// GRU (gates r z n), torch's semantics, the recurrent product h W_hh^T and the gate nonlinearities in one kernel
// (the composed step is a matmul, a bias add, slices and five elementwise kernels). One thread per (batch row,
// hidden unit): its gates' dot products with the row of h, then the cell.
//   in0 xg (N, G H)  in1 h (N, H)  in2 c (N, H) (LSTM; GRU: a dummy, never read)  in3 w_hh (G H, H)
//   in4 b_hh (G H) (a dummy without bias)
//   prm: [1] N  [2] H  [3] G: 4 (LSTM, out (N, 2H) = h' | c') or 3 (GRU, out (N, H) = h')  [4] 1 with b_hh
//   LSTM: c' = sigmoid(f) c + sigmoid(i) tanh(g), h' = sigmoid(o) tanh(c');  GRU: n = tanh(xg_n + r (h W_n^T + b_n)),
//   h' = n + z (h - n)

fn sigmoid_(x: f32) -> f32 {  // never exp of a large positive number (inf on some drivers, NaN on others)
    let e = exp(-abs(x));
    return select(e / (1.0 + e), 1.0 / (1.0 + e), x >= 0.0);
}

fn tanh_(x: f32) -> f32 {  // tanh saturates to +-1 in f32 past |x| = 9; some drivers' tanh is NaN for large |x|
    return tanh(clamp(x, -15.0, 15.0));
}

// the hidden part of gate g for batch row n, unit j: h[n] . w_hh[g H + j] + b_hh[g H + j]
fn hidden_gate(n: u32, g: u32, j: u32, H: u32) -> f32 {
    let r = g * H + j;
    var acc = 0.0;
    for (var k = 0u; k < H; k = k + 1u) {
        acc = acc + f32(in1[n * H + k]) * f32(in3[r * H + k]);
    }
    if (prm[4] != 0u) { acc = acc + f32(in4[r]); }
    return acc;
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let N = prm[1];
    let H = prm[2];
    let G = prm[3];
    let t = (wid.y * nwg.x + wid.x) * 64u + lid;
    if (t >= N * H) { return; }
    let n = t / H;
    let j = t % H;
    let x = n * G * H + j;                  // gate 0 of unit j in xg's row n
    if (G == 4u) {
        let i = sigmoid_(f32(in0[x]) + hidden_gate(n, 0u, j, H));
        let f = sigmoid_(f32(in0[x + H]) + hidden_gate(n, 1u, j, H));
        let g = tanh_(f32(in0[x + 2u * H]) + hidden_gate(n, 2u, j, H));
        let o = sigmoid_(f32(in0[x + 3u * H]) + hidden_gate(n, 3u, j, H));
        let c = f * f32(in2[n * H + j]) + i * g;
        out[n * 2u * H + j] = to_out(o * tanh_(c));
        out[n * 2u * H + H + j] = to_out(c);
    } else {
        let r = sigmoid_(f32(in0[x]) + hidden_gate(n, 0u, j, H));
        let z = sigmoid_(f32(in0[x + H]) + hidden_gate(n, 1u, j, H));
        let m = tanh_(f32(in0[x + 2u * H]) + r * hidden_gate(n, 2u, j, H));
        out[n * H + j] = to_out(m + z * (f32(in1[n * H + j]) - m));
    }
}
