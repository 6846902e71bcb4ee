// choose_qparams: the scale and zero point of each row of x, one workgroup per 4 rows, so
// that one workgroup writes each word of int8 zero points (see int8_quant.wgsl).
// Grid: (x, y) flatten ceil(rows / 4).
#include "linear/int8_quant.wgsl"

const THREADS: u32 = 64u;
const ROWS_PER_GROUP: u32 = 4u;

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
