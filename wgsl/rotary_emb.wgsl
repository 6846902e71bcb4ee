// Rotary position embedding on interleaved pairs (Meta / llama2.c layout), f32:
//   out[2i]   = x[2i] * cos - x[2i+1] * sin
//   out[2i+1] = x[2i] * sin + x[2i+1] * cos
// for xq [B, S, Hq, D] and xk [B, S, Hk, D] in one dispatch (q pairs first, then k pairs),
// with cos/sin [rows, D/2] read at row first_row + the pair's token and at the pair index:
// first_row is 0 for tables of this call's rows, the position for whole tables (the
// SymInt's own buffer, read here so that a decode step changes nothing but its value).
#include "common/index.wgsl"

struct Params {
  q_pairs: u32,           // pairs in xq: numel / 2
  k_pairs: u32,
  q_pairs_per_token: u32, // Hq * D / 2
  k_pairs_per_token: u32,
  half_dim: u32,          // D / 2, pairs per head and the width of cos/sin
  seq_len: u32,
  _pad0: u32,
  _pad1: u32,
}

struct FirstRow {
  row: i32,
}

@group(0) @binding(0) var<storage, read_write> xq_out: array<f32>;
@group(0) @binding(1) var<storage, read_write> xk_out: array<f32>;
@group(0) @binding(2) var<storage, read> xq: array<f32>;
@group(0) @binding(3) var<storage, read> xk: array<f32>;
@group(0) @binding(4) var<storage, read> freqs_cos: array<f32>;
@group(0) @binding(5) var<storage, read> freqs_sin: array<f32>;
@group(0) @binding(6) var<uniform> p: Params;
@group(0) @binding(7) var<uniform> first_row: FirstRow;

fn freq_index(pair: u32, pairs_per_token: u32) -> u32 {
  let token = u32(first_row.row) + (pair / pairs_per_token) % p.seq_len;
  return token * p.half_dim + pair % p.half_dim;
}

// The pair (re, im) rotated by the angle of table entry `f`.
fn rotated(re: f32, im: f32, f: u32) -> vec2<f32> {
  let c = freqs_cos[f];
  let s = freqs_sin[f];
  return vec2<f32>(re * c - im * s, re * s + im * c);
}

@compute @workgroup_size(ELEMENT_THREADS)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let index = element_index(gid, groups);
  if (index < p.q_pairs) {
    let r = rotated(xq[2u * index], xq[2u * index + 1u], freq_index(index, p.q_pairs_per_token));
    xq_out[2u * index] = r.x;
    xq_out[2u * index + 1u] = r.y;
  } else if (index < p.q_pairs + p.k_pairs) {
    let pair = index - p.q_pairs;
    let r = rotated(xk[2u * pair], xk[2u * pair + 1u], freq_index(pair, p.k_pairs_per_token));
    xk_out[2u * pair] = r.x;
    xk_out[2u * pair + 1u] = r.y;
  }
}
