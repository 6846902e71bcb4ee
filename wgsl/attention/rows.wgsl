// Reads and writes of key and value rows for the GPU attention kernels: four elements a
// step, from the caches (f32 or packed float16) or from this call's k and v.
#include "attention/bindings.wgsl"
#include "attention/rope.wgsl"

// Elements [i, i + 4) of a cache: one load where rows are whole vec4s (then i is always a
// multiple of 4), else two, shifted. Past a row's end they belong to the next row or are
// whatever robust access returns at the buffer's end: they only reach accumulator lanes
// that are never written out.
fn shifted(a: vec4<f32>, b: vec4<f32>, shift: u32) -> vec4<f32> {
  switch (shift) {
    case 0u: { return a; }
    case 1u: { return vec4<f32>(a.yzw, b.x); }
    case 2u: { return vec4<f32>(a.zw, b.xy); }
    default: { return vec4<f32>(a.w, b.xyz); }
  }
}

// Four float16 values (two words) as f32.
fn halves4(words: vec2<u32>) -> vec4<f32> {
  return vec4<f32>(unpack2x16float(words.x), unpack2x16float(words.y));
}

// With CACHE_F16 (i a multiple of 4), half of the vec4 of words holding elements
// [i - i % 8, i - i % 8 + 8).
fn cached_halves4(words: vec4<u32>, i: u32) -> vec4<f32> {
  return halves4(select(words.xy, words.zw, (i & 4u) != 0u));
}

fn cached_key4(i: u32) -> vec4<f32> {
  if (CACHE_F16) {
    return cached_halves4(k_cache[i / 8u], i);
  }
  if (HEAD_DIM % 4u == 0u) {
    return bitcast<vec4<f32>>(k_cache[i / 4u]);
  }
  return shifted(bitcast<vec4<f32>>(k_cache[i / 4u]), bitcast<vec4<f32>>(k_cache[i / 4u + 1u]), i % 4u);
}

fn cached_value4(i: u32) -> vec4<f32> {
  if (CACHE_F16) {
    return cached_halves4(v_cache[i / 8u], i);
  }
  if (HEAD_DIM % 4u == 0u) {
    return bitcast<vec4<f32>>(v_cache[i / 4u]);
  }
  return shifted(bitcast<vec4<f32>>(v_cache[i / 4u]), bitcast<vec4<f32>>(v_cache[i / 4u + 1u]), i % 4u);
}

// A new key's or value's dims as the cache holds them: rounded to float16 with CACHE_F16.
fn as_cached(x: vec4<f32>) -> vec4<f32> {
  if (CACHE_F16) {
    return halves4(vec2<u32>(pack2x16float(x.xy), pack2x16float(x.zw)));
  }
  return x;
}

fn new_key4(i: u32) -> vec4<f32> {
  return vec4<f32>(k[i], k[i + 1u], k[i + 2u], k[i + 3u]);
}

// Elements [i, i + 4) of a value row (see cached_key4 past the row's end).
fn value4(from_cache: bool, i: u32) -> vec4<f32> {
  if (from_cache) {
    return cached_value4(i);
  }
  return as_cached(vec4<f32>(v[i], v[i + 1u], v[i + 2u], v[i + 3u]));
}

// Dims [4g, 4g + 4) of a q or k row (two rotated pairs) at table row `t`; unchanged
// without ROPE.
fn rotated(x: vec4<f32>, t: u32, g: u32) -> vec4<f32> {
  if (!ROPE) {
    return x;
  }
  let first = t * (HEAD_DIM / 2u) + 2u * g;
  return rotate_pairs(x, rope_table[first], rope_table[first + 1u]);
}

// The table row of new key `key` (one of this call's): its offset from input_pos, from
// rope_first.
fn new_key_row(key: u32) -> u32 {
  return rope_first.row + key - position.input_pos;
}

// Elements [i, i + 4) of both caches (i a multiple of 4) <- key and value (as_cached's:
// float16 keeps them exactly).
fn store_cached4(i: u32, key: vec4<f32>, value: vec4<f32>) {
  if (CACHE_F16) {
    let word = 2u * ((i / 4u) % 2u);  // of the vec4 of words holding elements i - i % 8 ..
    k_cache[i / 8u][word] = pack2x16float(key.xy);
    k_cache[i / 8u][word + 1u] = pack2x16float(key.zw);
    v_cache[i / 8u][word] = pack2x16float(value.xy);
    v_cache[i / 8u][word + 1u] = pack2x16float(value.zw);
  } else {
    k_cache[i / 4u] = bitcast<vec4<u32>>(key);
    v_cache[i / 4u] = bitcast<vec4<u32>>(value);
  }
}

// With UPDATE_CACHE, this call's key (rotated with ROPE) and value of `row` and `kv_head`
// into the caches, by one workgroup of `threads` threads per kv head.
fn store_new_row(thread: u32, threads: u32, row: u32, kv_head: u32) {
  let src = (row * p.kv_heads + kv_head) * HEAD_DIM;
  let dst = ((position.input_pos + row) * p.kv_heads + kv_head) * HEAD_DIM;
  if (HEAD_DIM % 4u == 0u) {  // always with ROPE or CACHE_F16
    for (var g = thread; g < HEAD_DIM / 4u; g += threads) {
      let key = as_cached(rotated(new_key4(src + 4u * g), rope_first.row + row, g));
      store_cached4(dst + 4u * g, key, value4(false, src + 4u * g));
    }
    return;
  }
  for (var d = thread; d < HEAD_DIM; d += threads) {
    k_cache[(dst + d) / 4u][(dst + d) % 4u] = bitcast<u32>(k[src + d]);
    v_cache[(dst + d) / 4u][(dst + d) % 4u] = bitcast<u32>(v[src + d]);
  }
}
