// quantize_dequantize: x quantized to int8 and back, one thread per element, with the
// scales and zero points choose_qparams wrote (see int8_quant.wgsl).
// Grid: (x, y) flatten ceil(rows * row_len / ELEMENT_THREADS) workgroups.
#include "common/index.wgsl"
#include "linear/int8_quant.wgsl"

@group(0) @binding(4) var<storage, read> scales: array<f32>;

fn zero_point_of(row: u32) -> f32 {
  if (ZP_INT8) {
    let byte = row % 4u;
    return f32(extractBits(bitcast<i32>(zero_points[row / 4u]), 8u * byte, 8u));
  }
  return f32(bitcast<i32>(zero_points[row]));
}

@compute @workgroup_size(ELEMENT_THREADS)
fn quantize_dequantize(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = element_index(gid, groups);
  if (i >= p.rows * p.row_len) {
    return;
  }
  let row = i / p.row_len;
  let scale = scales[row];
  let zp = zero_point_of(row);
  let q = clamp(round(x[i] * div_exact(1.0, scale)) + zp, f32(p.qmin), f32(p.qmax));
  result[i] = (q - zp) * scale;
}
