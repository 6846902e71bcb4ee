// aten.index.Tensor with one 1-D index tensor at dim `dim` (the form ExecuTorch's Vulkan
// partitioner accepts): out[..., j, ...] = src[..., indices[j], ...], 32-bit elements.
// Negative indices count from the end as in PyTorch. Indices the host could not check
// (computed on the GPU) are clamped into [0, dim_size), so a bad one never reads outside
// `src`.
#include "common/index.wgsl"

struct Params {
  numel: u32,
  ndim: u32,
  dim: u32,
  dim_size: u32,  // src's size along `dim`; the host guarantees it is not 0
  out_sizes: Dims,
  src_strides: Dims,
}

@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read> indices: array<i32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(ELEMENT_THREADS)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let index = element_index(gid, groups);
  if (index >= p.numel) {
    return;
  }
  var rest = index;
  var src_index = 0u;
  for (var d = i32(p.ndim) - 1; d >= 0; d--) {
    let size = dim_at(p.out_sizes, u32(d));
    var coord = rest % size;
    rest = rest / size;
    if (u32(d) == p.dim) {
      var picked = indices[coord];
      if (picked < 0) {
        picked += i32(p.dim_size);
      }
      coord = u32(clamp(picked, 0, i32(p.dim_size) - 1));
    }
    src_index += coord * dim_at(p.src_strides, u32(d));
  }
  out[index] = src[src_index];
}
