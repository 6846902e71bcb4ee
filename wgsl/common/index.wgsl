// Index math shared by the one-thread-per-element kernels.

// Their workgroup size (the host sizes their grids by it).
const ELEMENT_THREADS: u32 = 256u;

// This invocation's element in a grid whose (x, y) workgroups flatten row-major.
fn element_index(gid: vec3<u32>, groups: vec3<u32>) -> u32 {
  return gid.x + gid.y * groups.x * ELEMENT_THREADS;
}

// Up to 8 sizes or strides in a uniform block (whose arrays need a 16-byte stride).
alias Dims = array<vec4<u32>, 2>;

fn dim_at(v: Dims, i: u32) -> u32 {
  return v[i / 4u][i % 4u];
}

// The offsets of element `index` of a row-major view of `sizes` (ndim dims) along two sets
// of strides, from one decomposition of `index` into coordinates.
fn strided_offsets(index: u32, ndim: u32, sizes: Dims, first: Dims, second: Dims) -> vec2<u32> {
  var rest = index;
  var first_offset = 0u;
  var second_offset = 0u;
  for (var d = i32(ndim) - 1; d >= 0; d--) {
    let size = dim_at(sizes, u32(d));
    let coord = rest % size;
    rest = rest / size;
    first_offset += coord * dim_at(first, u32(d));
    second_offset += coord * dim_at(second, u32(d));
  }
  return vec2<u32>(first_offset, second_offset);
}
