// out[t, d] = scale[id, d / group_size] * q[id, d] with id = indices[t], 4-bit weights kept
// packed: row id holds D values, two per byte, each stored as q + 8 (q in [-8, 7]).
// LINEAR_ORDER: low nibble first (the layout 4-bit linears use, which every current
// exporter repacks embeddings to); otherwise high nibble first. Scales are [V, D / gs]
// (not transposed). D and group_size are multiples of 8: a u32 word holds 8 values of one
// group. An id outside [0, V) gives a row of zeros instead of reading out of bounds.
// One thread per (token, word): it writes 8 outputs as two vec4s. `weights` and `scales`
// hold the table's rows [first_row, first_row + rows) (a block of a table split across
// bindings): a dispatch writes the outputs of the ids in its block, the first block's also
// those of bad ids.
#include "common/index.wgsl"

override LINEAR_ORDER: bool = true;

struct Params {
  first_row: u32,         // of the block
  rows: u32,              // in the block
  tokens: u32,
  dim: u32,               // D
  vocab: u32,             // V
  weight_row_words: u32,  // u32 words per packed weight row
  groups_per_row: u32,    // length of a scales row
  group_size: u32,
}

@group(0) @binding(0) var<storage, read_write> out: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> weights: array<u32>;
@group(0) @binding(2) var<storage, read> scales: array<f32>;
@group(0) @binding(3) var<storage, read> indices: array<i32>;
@group(0) @binding(4) var<uniform> p: Params;

@compute @workgroup_size(ELEMENT_THREADS)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = element_index(gid, groups);
  let words = p.dim / 8u;
  if (i >= p.tokens * words) {
    return;
  }
  let token = i / words;
  let w = i % words;
  let id = indices[token];
  let valid = id >= 0 && u32(id) < p.vocab;
  let row = u32(id) - p.first_row;  // in the block (wraps below it)
  var first = vec4<f32>(0.0);  // d = 8w .. 8w+3
  var second = vec4<f32>(0.0);  // d = 8w+4 .. 8w+7
  if (valid && row < p.rows) {
    let word = weights[row * p.weight_row_words + w];
    let scale = scales[row * p.groups_per_row + (8u * w) / p.group_size];
    let bytes = vec4<u32>(word, word >> 8u, word >> 16u, word >> 24u);
    var lead = vec4<f32>(bytes & vec4<u32>(0xFu)) - 8.0;  // the even d of each byte
    var trail = vec4<f32>((bytes >> vec4<u32>(4u)) & vec4<u32>(0xFu)) - 8.0;
    if (!LINEAR_ORDER) {
      let swap = lead;
      lead = trail;
      trail = swap;
    }
    first = scale * vec4<f32>(lead.x, trail.x, lead.y, trail.y);
    second = scale * vec4<f32>(lead.z, trail.z, lead.w, trail.w);
  } else if (valid || p.first_row != 0u) {
    return;  // another block's row
  }
  out[2u * i] = first;
  out[2u * i + 1u] = second;
}
