// out[m, n] = sum_k x[m, k] * weight[n, k] (+ bias[n]), f32 (aten.linear with an f32
// weight [N, K]): one thread an output, adding its products in order of k.
// Grid: (x, y) flatten ceil(M * N / ELEMENT_THREADS) workgroups.
#include "common/index.wgsl"

override HAS_BIAS: bool = false;

struct Params {
  m: u32,
  n: u32,
  k: u32,
}

@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> weight: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;  // any buffer when !HAS_BIAS
@group(0) @binding(4) var<uniform> p: Params;

@compute @workgroup_size(ELEMENT_THREADS)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = element_index(gid, groups);
  if (i >= p.m * p.n) {
    return;
  }
  let m = i / p.n;
  let n = i % p.n;
  var total = 0.0;
  for (var k = 0u; k < p.k; k++) {
    total += x[m * p.k + k] * weight[n * p.k + k];
  }
  if (HAS_BIAS) {
    total += bias[n];
  }
  out[i] = total;
}
