// Dynamic per-row (per-token) asymmetric int8 quantization of activations, as torchao
// does it for 8da4w linears (choose_qparams_affine + quantize_affine + dequantize_affine):
//   min_neg = min(min(row), 0), max_pos = max(max(row), 0)
//   scale = max(f32(max_pos - min_neg) / f32(qmax - qmin), eps)
//   zp = clamp(qmin - round(min_neg / scale), qmin, qmax)
//   q = clamp(round(x * (1 / scale)) + zp, qmin, qmax);  x_dq = (q - zp) * scale
// Entry points: `choose_qparams` (scale and zero point per row) and
// `quantize_dequantize` (x_dq, what the 4-bit linear then multiplies).
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

// Bindings 0-3 are shared by both entry points; 4 is quantize_dequantize's alone.
@group(0) @binding(0) var<storage, read_write> result: array<f32>;  // the scales, or x_dq
@group(0) @binding(1) var<storage, read_write> zero_points: array<u32>;  // int8 x4 or int32
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;
@group(0) @binding(4) var<storage, read> scales: array<f32>;

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

fn zero_point_of(row: u32) -> f32 {
  if (ZP_INT8) {
    let byte = row % 4u;
    return f32(extractBits(bitcast<i32>(zero_points[row / 4u]), 8u * byte, 8u));
  }
  return f32(bitcast<i32>(zero_points[row]));
}

// --- choose_qparams: one workgroup per 4 rows, so that one workgroup writes each word of
// int8 zero points. Grid: (x, y) flatten ceil(rows / 4).
const THREADS: u32 = 64u;
const ROWS_PER_GROUP: u32 = 4u;  // must match linear.py

var<workgroup> lows: array<f32, THREADS>;
var<workgroup> highs: array<f32, THREADS>;

@compute @workgroup_size(THREADS)
fn choose_qparams(
  @builtin(local_invocation_index) lid: u32,
  @builtin(workgroup_id) wg: vec3<u32>,
  @builtin(num_workgroups) groups: vec3<u32>,
) {
  let first_row = (wg.x + wg.y * groups.x) * ROWS_PER_GROUP;
  if (first_row >= p.rows) {
    return;  // uniform across the workgroup
  }
  var packed = 0u;
  for (var r = 0u; r < ROWS_PER_GROUP; r++) {
    let row = first_row + r;
    if (row >= p.rows) {
      break;  // uniform across the workgroup
    }
    // Starting from 0 gives min(min(row), 0) and max(max(row), 0) directly.
    var low = 0.0;
    var high = 0.0;
    for (var i = lid; i < p.row_len; i += THREADS) {
      let v = x[row * p.row_len + i];
      low = min(low, v);
      high = max(high, v);
    }
    lows[lid] = low;
    highs[lid] = high;
    workgroupBarrier();
    for (var stride = THREADS / 2u; stride > 0u; stride /= 2u) {
      if (lid < stride) {
        lows[lid] = min(lows[lid], lows[lid + stride]);
        highs[lid] = max(highs[lid], highs[lid + stride]);
      }
      workgroupBarrier();
    }
    if (lid == 0u) {
      let scale = max(div_exact(highs[0] - lows[0], f32(p.qmax - p.qmin)), p.eps);
      let zp = i32(clamp(f32(p.qmin) - round(div_exact(lows[0], scale)), f32(p.qmin), f32(p.qmax)));
      result[row] = scale;
      if (ZP_INT8) {
        packed |= (bitcast<u32>(zp) & 0xFFu) << (8u * r);
      } else {
        zero_points[row] = bitcast<u32>(zp);
      }
    }
    workgroupBarrier();  // lows/highs are reused by the next row
  }
  if (ZP_INT8 && lid == 0u) {
    zero_points[first_row / 4u] = packed;
  }
}

// --- quantize_dequantize: one thread per element of x, with the scales and zero points
// choose_qparams wrote. Grid: linear over rows * row_len.
@compute @workgroup_size(256)
fn quantize_dequantize(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = gid.x + gid.y * groups.x * 256u;
  if (i >= p.rows * p.row_len) {
    return;
  }
  let row = i / p.row_len;
  let scale = scales[row];
  let zp = zero_point_of(row);
  let q = clamp(round(x[i] * div_exact(1.0, scale)) + zp, f32(p.qmin), f32(p.qmax));
  result[i] = (q - zp) * scale;
}
