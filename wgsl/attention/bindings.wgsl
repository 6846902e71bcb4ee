// The bindings and options of the GPU attention kernels (split, whole_row, tiled) and
// where a key's row lies. Keys below cached_len() come from the caches, later ones from
// this call's k and v.
//
// With UPDATE_CACHE (sdpa_with_kv_cache) the dispatch also stores k and v at cache rows
// [input_pos, input_pos + S) and reads those keys from k and v, never from the rows being
// written, so one dispatch does both without a race. Without it (custom_sdpa after
// update_cache ops) the caches hold every key.
//
// With ROPE, q and k arrive before their rotary embedding, applied as they are read:
// query row s and new key input_pos + s at row rope_first + s of `rope_table`, the
// rotated keys stored in the cache (HEAD_DIM is then a multiple of 4).
//
// The caches are bound as words: f32 values, or with CACHE_F16 (an f16 program's caches,
// HEAD_DIM a multiple of 4) float16 values packed two per word; every key and value is
// then attended as the cache holds it, this call's new ones rounded to float16 too.
#include "common/limits.wgsl"
#include "attention/params.wgsl"

override UPDATE_CACHE: bool = true;
override ROPE: bool = false;
override CACHE_F16: bool = false;
override HEAD_DIM: u32 = 64u;  // at most 256
// Vec4 groups of a head's dims (derived from HEAD_DIM, never set by the host).
override DIM_GROUPS: u32 = (HEAD_DIM + 3u) / 4u;

@group(0) @binding(0) var<storage, read_write> out: array<f32>;
// Per (row, head, split): max score, sum of exp(score - max), then HEAD_DIM weighted sums.
@group(0) @binding(1) var<storage, read_write> partials: array<f32>;
@group(0) @binding(2) var<storage, read> q: array<f32>;
@group(0) @binding(3) var<storage, read> k: array<f32>;
@group(0) @binding(4) var<storage, read> v: array<f32>;
// Read as vec4s (their buffers hold whole vec4s): one load where D is a multiple of 4.
@group(0) @binding(5) var<storage, read_write> k_cache: array<vec4<u32>>;
@group(0) @binding(6) var<storage, read_write> v_cache: array<vec4<u32>>;
@group(0) @binding(7) var<uniform> p: Params;
@group(0) @binding(8) var<uniform> position: Position;
// Without ROPE any buffers stand in for these: they are never read.
@group(0) @binding(9) var<storage, read> rope_table: array<vec2<f32>>;
@group(0) @binding(10) var<uniform> rope_first: FirstRow;

// Keys below it are in the caches; with UPDATE_CACHE this call's rows are still in k / v.
fn cached_len() -> u32 {
  if (UPDATE_CACHE) {
    return position.input_pos;
  }
  return position.input_pos + p.seq_len;
}

// Offset of element 0 of key (or value) `key` for kv head `kv_head`, in the caches for
// keys below cached_len, else in k / v.
fn row_offset(key: u32, kv_head: u32) -> u32 {
  let cached = cached_len();
  if (key < cached) {
    return (key * p.kv_heads + kv_head) * HEAD_DIM;
  }
  return ((key - cached) * p.kv_heads + kv_head) * HEAD_DIM;
}
