// Strided copy of 32-bit elements (f32 and i32 alike: the bits are moved, not read):
//   out[out_offset + Σ c_d·out_strides_d] = src[src_offset + Σ c_d·src_strides_d]
// for every coordinate c of a view of `sizes` (at most 8 dims). A contiguous output
// (out_strides = row-major strides of sizes) makes this a gather: select, slice and
// permute; a strided output places one input of a cat inside the larger output.
#include "common/index.wgsl"

struct Params {
  numel: u32,
  ndim: u32,
  src_offset: u32,
  out_offset: u32,
  sizes: Dims,
  src_strides: Dims,
  out_strides: Dims,
}

@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(ELEMENT_THREADS)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let index = element_index(gid, groups);
  if (index >= p.numel) {
    return;
  }
  let offsets = strided_offsets(index, p.ndim, p.sizes, p.src_strides, p.out_strides);
  out[p.out_offset + offsets.y] = src[p.src_offset + offsets.x];
}
