// out = a OP (alpha * b), elementwise with NumPy/PyTorch broadcasting, f32.
// Shapes have at most 8 dims (right-aligned); a broadcast dim has stride 0. The host
// merges dims that index alike, so operands of equal shape arrive as one dim.
#include "common/index.wgsl"

override OP: u32 = 0u;  // 0 add, 1 sub, 2 mul, 3 div

struct Params {
  numel: u32,
  ndim: u32,
  alpha: f32,
  _pad: u32,
  out_sizes: Dims,
  a_strides: Dims,
  b_strides: Dims,
}

@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(ELEMENT_THREADS)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let index = element_index(gid, groups);
  if (index >= p.numel) {
    return;
  }
  var offsets: vec2<u32>;
  if (p.ndim == 1u) {
    // No divisions (each costs several instructions per lane on CPU adapters).
    offsets = vec2<u32>(index * p.a_strides[0].x, index * p.b_strides[0].x);
  } else {
    offsets = strided_offsets(index, p.ndim, p.out_sizes, p.a_strides, p.b_strides);
  }
  let x = a[offsets.x];
  let y = p.alpha * b[offsets.y];
  var r: f32;
  switch OP {
    case 0u: { r = x + y; }
    case 1u: { r = x - y; }
    case 2u: { r = x * y; }
    default: { r = x / y; }
  }
  out[index] = r;
}
