// out = f(x), elementwise, f32; and silu_mul: out = silu(x) * y, the Llama MLP's gate
// (sigmoid, mul and mul of the export fused into one dispatch by the runtime).
#include "common/index.wgsl"

override OP: u32 = 0u;  // 0 sigmoid, 1 neg, 2 exp, 3 relu, 4 silu, 5 tanh

@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<uniform> numel: vec4<u32>;
@group(0) @binding(3) var<storage, read> y: array<f32>;  // silu_mul only

fn sigmoid(v: f32) -> f32 {
  // Split by sign so exp never overflows.
  if (v >= 0.0) {
    return 1.0 / (1.0 + exp(-v));
  }
  let e = exp(v);
  return e / (1.0 + e);
}

@compute @workgroup_size(ELEMENT_THREADS)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = element_index(gid, groups);
  if (i >= numel.x) {
    return;
  }
  let v = x[i];
  var r: f32;
  switch OP {
    case 0u: { r = sigmoid(v); }
    case 1u: { r = -v; }
    case 2u: { r = exp(v); }
    case 3u: { r = max(v, 0.0); }
    case 4u: { r = v * sigmoid(v); }
    default: { r = tanh(v); }
  }
  out[i] = r;
}

@compute @workgroup_size(ELEMENT_THREADS)
fn silu_mul(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = element_index(gid, groups);
  if (i >= numel.x) {
    return;
  }
  // The unfused ops' order: s = sigmoid(x); t = x * s; out = t * y.
  let v = x[i];
  out[i] = (v * sigmoid(v)) * y[i];
}
