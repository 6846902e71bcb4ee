// Sum over the trailing dims of a contiguous f32 tensor: x seen as [rows, len], one thread
// a row, adding its values in order (aten.sum.dim_IntList over the last dims).
// Grid: (x, y) flatten ceil(rows / ELEMENT_THREADS) workgroups.
#include "common/index.wgsl"

struct Params {
  rows: u32,
  len: u32,
}

@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(ELEMENT_THREADS)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let row = element_index(gid, groups);
  if (row >= p.rows) {
    return;
  }
  let first = row * p.len;
  var total = 0.0;
  for (var i = 0u; i < p.len; i++) {
    total += x[first + i];
  }
  out[row] = total;
}
