// out = a OP (alpha * b), elementwise with NumPy/PyTorch broadcasting, f32.
// Shapes have at most 8 dims (right-aligned); a broadcast dim has stride 0. The host
// merges dims that index alike (binary.py), so operands of equal shape arrive as one dim.
override OP: u32 = 0u;  // 0 add, 1 sub, 2 mul, 3 div

struct Params {
  numel: u32,
  ndim: u32,
  alpha: f32,
  _pad: u32,
  out_sizes: array<vec4<u32>, 2>,
  a_strides: array<vec4<u32>, 2>,
  b_strides: array<vec4<u32>, 2>,
}

@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

fn dim_at(v: array<vec4<u32>, 2>, i: u32) -> u32 {
  return v[i / 4u][i % 4u];
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let index = gid.x + gid.y * groups.x * 256u;
  if (index >= p.numel) {
    return;
  }
  var a_index = 0u;
  var b_index = 0u;
  if (p.ndim == 1u) {
    // No divisions (each costs several instructions per lane on CPU adapters).
    a_index = index * p.a_strides[0].x;
    b_index = index * p.b_strides[0].x;
  } else {
    var rest = index;
    for (var d = i32(p.ndim) - 1; d >= 0; d--) {
      let size = dim_at(p.out_sizes, u32(d));
      let coord = rest % size;
      rest = rest / size;
      a_index += coord * dim_at(p.a_strides, u32(d));
      b_index += coord * dim_at(p.b_strides, u32(d));
    }
  }
  let x = a[a_index];
  let y = p.alpha * b[b_index];
  var r: f32;
  switch OP {
    case 0u: { r = x + y; }
    case 1u: { r = x - y; }
    case 2u: { r = x * y; }
    default: { r = x / y; }
  }
  out[index] = r;
}
