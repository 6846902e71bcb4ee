// out[t, d] = weight[indices[t], d], f32. An id outside [0, V) gives zeros instead of
// reading out of bounds. One thread per output element. `weight` holds the table's rows
// [first_row, first_row + rows) (a block of a table split across bindings): a dispatch
// writes the outputs of the ids in its block, the first block's also those of bad ids.
#include "common/index.wgsl"

struct Params {
  first_row: u32,  // of the block
  rows: u32,       // in the block
  tokens: u32,
  dim: u32,    // D
  vocab: u32,  // V
  _pad0: u32,
  _pad1: u32,
  _pad2: u32,
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
  let valid = id >= 0 && u32(id) < p.vocab;
  let row = u32(id) - p.first_row;  // in the block (wraps below it)
  if (valid && row < p.rows) {
    out[i] = weight[row * p.dim + i % p.dim];
  } else if (!valid && p.first_row == 0u) {
    out[i] = 0.0;
  }
}
