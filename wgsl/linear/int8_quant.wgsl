// Dynamic per-row (per-token) asymmetric int8 quantization of activations, as torchao
// does it for 8da4w linears (choose_qparams_affine + quantize_affine + dequantize_affine):
//   min_neg = min(min(row), 0), max_pos = max(max(row), 0)
//   scale = max(f32(max_pos - min_neg) / f32(qmax - qmin), eps)
//   zp = clamp(qmin - round(min_neg / scale), qmin, qmax)
//   q = clamp(round(x * (1 / scale)) + zp, qmin, qmax);  x_dq = (q - zp) * scale
// Kernels: choose_qparams.wgsl (scale and zero point per row) and quantize_dequantize.wgsl
// (x_dq, what the 4-bit linear then multiplies); this file holds what they share.
//
// The result must reproduce PyTorch's rounding decisions bit for bit: a scale one ulp off
// can move x * (1 / scale) across a .5 and change q by one, an output error of a whole
// scale * weight. WGSL's '/' is only accurate to 2.5 ulp, so every division here goes
// through div_exact. round() is round-half-to-even in both WGSL and PyTorch.
override ZP_INT8: bool = true;  // zero points stored as int8 (4 per word), else int32

struct Params {
  rows: u32,
  row_len: u32,
  qmin: i32,
  qmax: i32,
  eps: f32,  // smallest allowed scale
  _pad0: u32,
  _pad1: u32,
  _pad2: u32,
}

// The bindings both kernels have; quantize_dequantize adds the scales.
@group(0) @binding(0) var<storage, read_write> result: array<f32>;  // the scales, or x_dq
@group(0) @binding(1) var<storage, read_write> zero_points: array<u32>;  // int8 x4 or int32
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

// a / b correctly rounded (round to nearest, ties to even), for finite a and a positive
// normal b: long division of the 24-bit significands. A quotient below the normal range
// is flushed to zero: the callers clamp it up to eps or round it to 0 anyway.
fn div_exact(a: f32, b: f32) -> f32 {
  let a_bits = bitcast<u32>(a);
  let b_bits = bitcast<u32>(b);
  let sign = a_bits & 0x80000000u;
  var a_exp = i32((a_bits >> 23u) & 0xFFu);
  var a_sig = a_bits & 0x7FFFFFu;
  if (a_exp == 0) {
    if (a_sig == 0u) {
      return a;  // ±0
    }
    let shift = countLeadingZeros(a_sig) - 8u;  // normalize a subnormal a
    a_sig <<= shift;
    a_exp = 1 - i32(shift);
  } else {
    a_sig |= 0x800000u;
  }
  let b_exp = i32((b_bits >> 23u) & 0xFFu);
  let b_sig = (b_bits & 0x7FFFFFu) | 0x800000u;
  var exp = a_exp - b_exp + 127;
  var rem = a_sig;
  if (rem < b_sig) {  // make the significand quotient fall in [1, 2)
    rem <<= 1u;
    exp -= 1;
  }
  // 25 quotient bits: 24 significand bits and a guard bit; a nonzero remainder is sticky.
  var quotient = 0u;
  for (var i = 0; i < 25; i++) {
    quotient <<= 1u;
    if (rem >= b_sig) {
      rem -= b_sig;
      quotient |= 1u;
    }
    rem <<= 1u;
  }
  var sig = quotient >> 1u;
  if ((quotient & 1u) == 1u && (rem != 0u || (sig & 1u) == 1u)) {
    sig += 1u;
  }
  if (sig == 0x1000000u) {
    sig >>= 1u;
    exp += 1;
  }
  if (exp <= 0) {
    return bitcast<f32>(sign);
  }
  if (exp >= 255) {
    return bitcast<f32>(sign | 0x7F800000u);
  }
  return bitcast<f32>(sign | (u32(exp) << 23u) | (sig & 0x7FFFFFu));
}
