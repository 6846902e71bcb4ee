// out[t, d] = weight[indices[t], d], f32. An id outside [0, V) gives zeros instead of
// reading out of bounds. One thread per output element.
#include "common/index.wgsl"

struct Params {
  tokens: u32,
  dim: u32,    // D
  vocab: u32,  // V
  _pad: u32,
}

@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<storage, read> weight: array<f32>;
@group(0) @binding(2) var<storage, read> indices: array<i32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(ELEMENT_THREADS)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = element_index(gid, groups);
  if (i >= p.tokens * p.dim) {
    return;
  }
  let id = indices[i / p.dim];
  var value = 0.0;
  if (id >= 0 && u32(id) < p.vocab) {
    value = weight[u32(id) * p.dim + i % p.dim];
  }
  out[i] = value;
}
