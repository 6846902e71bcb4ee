// Softmax (or log-softmax) along one dim, f32. The tensor is seen as [outer, len, inner]
// with the reduced dim in the middle; a row is one (outer, inner) pair, its elements
// `inner` apart. One workgroup per row: each thread keeps an online (max, sum of
// exp(v - max)) over a strided slice of the row, a shared-memory tree merges the pairs,
// and a second pass writes the results. Subtracting the row max keeps exp finite.
#include "common/limits.wgsl"

override LOG: bool = false;  // log_softmax instead of softmax

struct Params {
  rows: u32,
  len: u32,
  inner: u32,
  _pad: u32,
}

@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

const WORKGROUP_SIZE: u32 = 256u;

var<workgroup> row_max: array<f32, WORKGROUP_SIZE>;
var<workgroup> row_sum: array<f32, WORKGROUP_SIZE>;

@compute @workgroup_size(256)
fn main(
  @builtin(workgroup_id) group: vec3<u32>,
  @builtin(num_workgroups) groups: vec3<u32>,
  @builtin(local_invocation_index) thread: u32,
) {
  let row = group.x + group.y * groups.x;
  if (row >= p.rows) {
    return;  // the whole workgroup leaves together: barriers below stay uniform
  }
  let base = (row / p.inner) * p.len * p.inner + row % p.inner;
  var m = LOWEST;
  var s = 0.0;
  for (var i = thread; i < p.len; i += WORKGROUP_SIZE) {
    let v = x[base + i * p.inner];
    let m_new = max(m, v);
    s = s * exp(m - m_new) + exp(v - m_new);
    m = m_new;
  }
  row_max[thread] = m;
  row_sum[thread] = s;
  workgroupBarrier();
  for (var stride = WORKGROUP_SIZE / 2u; stride > 0u; stride /= 2u) {
    if (thread < stride) {
      let m_a = row_max[thread];
      let m_b = row_max[thread + stride];
      let m_new = max(m_a, m_b);
      row_sum[thread] = row_sum[thread] * exp(m_a - m_new) + row_sum[thread + stride] * exp(m_b - m_new);
      row_max[thread] = m_new;
    }
    workgroupBarrier();
  }
  let total_max = row_max[0];
  let total_sum = row_sum[0];
  let log_sum = log(total_sum);
  for (var i = thread; i < p.len; i += WORKGROUP_SIZE) {
    let index = base + i * p.inner;
    if (LOG) {
      out[index] = x[index] - total_max - log_sum;
    } else {
      out[index] = exp(x[index] - total_max) / total_sum;
    }
  }
}
