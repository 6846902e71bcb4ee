// out[r, :] = x[r, :] * inverseSqrt(mean(x[r, :]^2) + eps) * weight, f32.
// Entry points by adapter kind: on GPUs `main`, one workgroup per row; on CPU adapters
// `row_per_thread`, which needs no barriers.
#include "common/reduce.wgsl"

struct Params {
  rows: u32,
  width: u32,
  eps: f32,
  _pad: u32,
}

@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> weight: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

const WORKGROUP_SIZE: u32 = 256u;
var<workgroup> reduction: array<f32, WORKGROUP_SIZE>;

// One workgroup per row: each thread sums the squares of a strided slice of the row,
// then a shared-memory tree adds the partial sums.
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
  let base = row * p.width;
  var sum_squares = 0.0;
  for (var i = thread; i < p.width; i += WORKGROUP_SIZE) {
    let v = x[base + i];
    sum_squares += v * v;
  }
  let inv_rms = inverseSqrt(workgroup_sum(thread, WORKGROUP_SIZE, sum_squares) / f32(p.width) + p.eps);
  for (var i = thread; i < p.width; i += WORKGROUP_SIZE) {
    out[base + i] = x[base + i] * inv_rms * weight[i];
  }
}

// One thread per row. CPU adapters run a workgroup's invocations one SIMD batch after
// another and switch between all of them at every barrier, which costs them far more
// than a row's arithmetic.
// Grid: (x, y) flatten ceil(rows / ROW_THREADS) workgroups.
const ROW_THREADS: u32 = 64u;  // rows per workgroup (the handler's too)

@compute @workgroup_size(ROW_THREADS)
fn row_per_thread(
  @builtin(local_invocation_index) thread: u32,
  @builtin(workgroup_id) group: vec3<u32>,
  @builtin(num_workgroups) groups: vec3<u32>,
) {
  let row = (group.x + group.y * groups.x) * ROW_THREADS + thread;
  if (row >= p.rows) {
    return;
  }
  let base = row * p.width;
  var sum_squares = 0.0;
  for (var i = 0u; i < p.width; i++) {
    let v = x[base + i];
    sum_squares += v * v;
  }
  let inv_rms = inverseSqrt(sum_squares / f32(p.width) + p.eps);
  for (var i = 0u; i < p.width; i++) {
    out[base + i] = x[base + i] * inv_rms * weight[i];
  }
}
