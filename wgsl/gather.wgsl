// Strided copy of 32-bit elements (f32 and i32 alike: the bits are moved, not read):
//   out[out_offset + Σ c_d·out_strides_d] = src[src_offset + Σ c_d·src_strides_d]
// for every coordinate c of a view of `sizes` (at most 8 dims). A contiguous output
// (out_strides = row-major strides of sizes) makes this a gather: select, slice and
// permute; a strided output places one input of a cat inside the larger output.
struct Params {
  numel: u32,
  ndim: u32,
  src_offset: u32,
  out_offset: u32,
  sizes: array<vec4<u32>, 2>,
  src_strides: array<vec4<u32>, 2>,
  out_strides: array<vec4<u32>, 2>,
}

@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<uniform> p: Params;

fn dim_at(v: array<vec4<u32>, 2>, i: u32) -> u32 {
  return v[i / 4u][i % 4u];
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let index = gid.x + gid.y * groups.x * 256u;
  if (index >= p.numel) {
    return;
  }
  var rest = index;
  var src_index = p.src_offset;
  var out_index = p.out_offset;
  for (var d = i32(p.ndim) - 1; d >= 0; d--) {
    let size = dim_at(p.sizes, u32(d));
    let coord = rest % size;
    rest = rest / size;
    src_index += coord * dim_at(p.src_strides, u32(d));
    out_index += coord * dim_at(p.out_strides, u32(d));
  }
  out[out_index] = src[src_index];
}
