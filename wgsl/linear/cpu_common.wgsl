// What the kernels for CPU adapters (gemv, gemv_rows) share. CPU-emulated adapters
// (SwiftShader, lavapipe) run a workgroup's invocations one SIMD batch after another, so
// barriers cost more than they save, and a load (a gather, lane by lane) far more than an
// arithmetic instruction: every thread walks its own weight rows without shared memory,
// and makes each value it loads serve several products.
// Accumulators are scalars or vectors, never private arrays indexed in a loop (SwiftShader
// spills those), and no loop is nested in the loop over K (the values a loop carries are
// spilled and blended under the lane mask every iteration).
//
// Nibbles are taken out of a word by masks alone, never shifted: SwiftShader's JIT has no
// vector shift by a per-lane amount, and a WGSL shift is one. Nibble j masked in place is
// (q + 8) * 16^j, exact in f32; the x value it multiplies is scaled by 16^-j instead
// (x_word, once per word for all of a thread's outputs). The top nibble, its bit 3
// flipped, converts as a signed value to q * 16^7 itself; the other seven carry the + 8,
// which each group takes off once as 8 times the sum of their x (offset_sum).
#include "linear/common.wgsl"

// The scales read as vec4s, 4 outputs' scales in one load (these kernels read them only so).
@group(0) @binding(3) var<storage, read> scale_vecs: array<vec4<f32>>;

// The scales of outputs first .. first + 3 at scales[first] (first a multiple of 4).
fn scale_vec(first: u32) -> vec4<f32> {
  return scale_vecs[first / 4u];
}

const PLACES_LO = vec4<f32>(1.0, 0.0625, 0.00390625, 0.000244140625);  // 16^-j, j = 0 .. 3
const PLACES_HI = vec4<f32>(1.52587890625e-05, 9.5367431640625e-07, 5.9604644775390625e-08, 3.725290298461914e-09);
const TOP_PLACE: f32 = 268435456.0;  // 16^7: the top x value of a word from its placed value (hi.w)

// x values 8w .. 8w + 7 of a row, as the nibbles of word w meet them: scaled to their
// places (lo: 8w .. 8w + 3, hi: 8w + 4 .. 8w + 7), and the sum of those whose nibbles
// carry the + 8 (all but the top one).
struct XWord {
  lo: vec4<f32>,
  hi: vec4<f32>,
  offset_sum: f32,
}

fn x_word(x_row: u32, w: u32) -> XWord {
  let xa = x_vec(x_row, 2u * w);
  let xb = x_vec(x_row, 2u * w + 1u);
  let offset = xa + vec4<f32>(xb.xyz, 0.0);
  return XWord(xa * PLACES_LO, xb * PLACES_HI, offset.x + offset.y + offset.z + offset.w);
}

// `sum` plus one word of weights times its 8 x values (placed), the + 8 of 7 nibbles
// included. Written out as scalars, nibble by nibble: in SwiftShader's JIT (Subzero) every
// vector a shader builds is copied through the stack, which a dot() of built vectors adds.
fn add_q4_places(sum: f32, word: u32, x_lo: vec4<f32>, x_hi: vec4<f32>) -> f32 {
  let w = bitcast<i32>(word);
  var s = sum + f32(w & 0xF) * x_lo.x;
  s += f32(w & 0xF0) * x_lo.y;
  s += f32(w & 0xF00) * x_lo.z;
  s += f32(w & 0xF000) * x_lo.w;
  s += f32(w & 0xF0000) * x_hi.x;
  s += f32(w & 0xF00000) * x_hi.y;
  s += f32(w & 0xF000000) * x_hi.z;
  return s + f32(bitcast<i32>(word ^ 0x80000000u) & bitcast<i32>(0xF0000000u)) * x_hi.w;
}

// Where the weight rows of outputs first .. first + 3 start, in words.
fn weight_rows4(first: u32) -> vec4<u32> {
  return vec4<u32>(weight_row(first), weight_row(first + 1u), weight_row(first + 2u), weight_row(first + 3u));
}

// A thread's 16 outputs of one row of x, 4 at a time.
struct Outputs16 {
  a: vec4<f32>,
  b: vec4<f32>,
  c: vec4<f32>,
  d: vec4<f32>,
}

// Stores outputs n0 .. n0 + 15 of row m, those below M and N.
fn store_row16(m: u32, n0: u32, totals: Outputs16) {
  if (m >= p.m) {
    return;
  }
  let by_four = array<vec4<f32>, 4>(totals.a, totals.b, totals.c, totals.d);
  for (var j = 0u; j < 16u; j++) {
    if (n0 + j < p.n) {
      store(m, n0 + j, by_four[j / 4u][j % 4u]);
    }
  }
}

// p.silu_mul_out: silu(gate) * up for outputs o0 .. o0 + 3 from the gate's and the up's
// sums, the bias added to each first (as the gate and up projections add theirs), in
// the unfused ops' order.
fn silu_mul4(o0: u32, gate: vec4<f32>, up: vec4<f32>) -> vec4<f32> {
  var g = gate;
  var u = up;
  if (HAS_BIAS) {
    let b = p.split0 + o0;
    g += bias[o0 / 4u];
    u += bias[b / 4u];
  }
  return (g * sigmoid(g)) * u;
}

// p.silu_mul_out: stores outputs o0 .. o0 + 3 of row m, those below N / 2.
fn store_silu_mul4(m: u32, o0: u32, values: vec4<f32>) {
  for (var j = 0u; j < 4u; j++) {
    if (o0 + j < p.split0) {
      out[m * p.split0 + o0 + j] = values[j];
    }
  }
}

// How many values a row of the output holds: N, or N / 2 with p.silu_mul_out.
fn stored_outputs() -> u32 {
  return select(p.n, p.split0, p.silu_mul_out != 0u);
}

// Whether every output of a quad (whose thread at `lane` starts at output n0, each lane
// `outputs` after the last) is past the stored ones: such a quad leaves whole; in the
// others every thread stays, as the kernel may run quad operations.
fn quad_past_n(n0: u32, lane: u32, outputs: u32) -> bool {
  return n0 - lane * outputs >= stored_outputs();
}

// The first weight rows of the 4 blocks of 4 outputs of a thread whose first output is
// n0 (gemv's totals a .. d, gemv_rows' Outputs16 a .. d): n0 .. n0 + 15, or with
// `silu_mul` the gate's rows of its 8 outputs (a, b), then the up's (c, d).
fn block_rows(n0: u32, silu_mul: bool) -> vec4<u32> {
  let up = select(n0 + 8u, p.split0 + n0, silu_mul);
  return vec4<u32>(n0, n0 + 4u, up, up + 4u);
}
