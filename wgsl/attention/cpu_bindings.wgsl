// The bindings of the attention kernels for CPU adapters (cpu.wgsl and its combine),
// rows read as vec4s: HEAD_DIM is a multiple of 4, at most 64.
#include "common/limits.wgsl"
#include "attention/params.wgsl"

override HEAD_DIM: u32 = 64u;
override VEC4S: u32 = HEAD_DIM / 4u;

@group(0) @binding(0) var<storage, read_write> out: array<vec4<f32>>;
// With splits: per (row, head, split) max, sum, HEAD_DIM weighted sums; else unbound.
@group(0) @binding(1) var<storage, read_write> partials: array<f32>;
@group(0) @binding(2) var<storage, read> q: array<vec4<f32>>;
// ROPE_DECODE: this call's key and value ([1, 1, kv_heads, HEAD_DIM]); else unbound.
@group(0) @binding(3) var<storage, read> k_new: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> v_new: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> k_cache: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read_write> v_cache: array<vec4<f32>>;
@group(0) @binding(7) var<uniform> p: Params;
@group(0) @binding(8) var<uniform> position: Position;
// ROPE_DECODE: cos, sin pairs [rows, HEAD_DIM / 2] and the query row's row of them.
@group(0) @binding(9) var<storage, read> rope_table: array<vec2<f32>>;
@group(0) @binding(10) var<uniform> rope_first: FirstRow;
