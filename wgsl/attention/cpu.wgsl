// Causal attention over a KV cache for CPU adapters (SwiftShader, lavapipe), f32, in one
// pass with no workgroup memory and no barriers: such adapters run a workgroup's
// invocations one SIMD batch after another, and every barrier switches between them.
// Every key is read from the caches (this call's rows were copied there before).
//
// A quad (4 neighbouring invocations, which those adapters run as SIMD lanes) owns
// QUAD_ROWS query rows of QUAD_HEADS query heads sharing a kv head, and walks the keys of
// its last row once, KEY_BLOCK at a time, with an online softmax per head; each row
// weights the keys past its own position 0. Every key and value a lane loads (a gather
// there, lane by lane, costing far more than the arithmetic) serves all those heads.
//
// With ROPE_DECODE (one row) the quad rotates q as it loads it, attends the cached keys,
// then the new key (rotated) and value read from k_new and v_new, and stores them in the
// caches at the position (each quad of the kv head stores the same values; none reads
// that cache row).
//
// With key splits (p.splits > 1, decode rows of many keys, never with several rows a
// quad), quad (task, split) walks an even share of the row's keys and writes its heads'
// running max, sum and weighted values to `partials`, merged by cpu_combine.wgsl; the
// last split attends and stores this call's key (ROPE_DECODE).
//
// Grid: (x, y) flatten ceil(splits * ceil(seq_len / QUAD_ROWS) * q_heads / QUAD_HEADS * 4 /
// WORKGROUP_SIZE) workgroups.
enable subgroups;
// Quad operations sit in the loop over this row's keys, whose trip count differs between
// rows but never within a quad.
diagnostic(off, subgroup_uniformity);

#include "attention/cpu_blocks.wgsl"

// One quad per workgroup: these adapters run a workgroup on one core, and a decode step
// has a quad per kv head only, which larger workgroups would put on fewer cores.
const WORKGROUP_SIZE: u32 = 4u;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
  @builtin(local_invocation_index) lid: u32,
  @builtin(workgroup_id) wg: vec3<u32>,
  @builtin(num_workgroups) groups: vec3<u32>,
) {
  let thread = (wg.x + wg.y * groups.x) * WORKGROUP_SIZE + lid;
  let quads_per_row = p.q_heads / QUAD_HEADS;
  // A whole quad is past the last task or none of it: no lane leaves a quad early.
  let tasks = (p.seq_len + QUAD_ROWS - 1u) / QUAD_ROWS * quads_per_row;
  if (thread / LANES >= tasks * p.splits) {
    return;
  }
  let split = thread / LANES / tasks;
  let task = thread / LANES % tasks;  // row / QUAD_ROWS * quads_per_row + quad of the row
  let lane = thread % LANES;
  let row = task / quads_per_row * QUAD_ROWS;  // the quad's first row
  let first_head = (task % quads_per_row) * QUAD_HEADS;
  let kv_head = first_head / (p.q_heads / p.kv_heads);
  let first = lane * 4u;  // this lane's first vec4 of a row

  // The quad's rows row .. row + QUAD_ROWS - 1, those past the call's last attending it
  // again (stored once). Heads first_head .. first_head + QUAD_HEADS - 1 of a row follow
  // each other in q.
  let last_row = min(row + QUAD_ROWS - 1u, p.seq_len - 1u);
  let row_step = p.q_heads * VEC4S;
  let q_base = (row * p.q_heads + first_head) * VEC4S;
  let queries0 = row_queries(q_base, first);
  var queries1 = RowQueries();
  var queries2 = RowQueries();
  var queries3 = RowQueries();
  if (QUAD_ROWS > 1u) {
    queries1 = row_queries(q_base + (min(row + 1u, last_row) - row) * row_step, first);
  }
  if (QUAD_ROWS > 2u) {
    queries2 = row_queries(q_base + (min(row + 2u, last_row) - row) * row_step, first);
    queries3 = row_queries(q_base + (last_row - row) * row_step, first);
  }

  // Causal: row r attends keys up to and including its position, input_pos + r.
  let keys = position.input_pos + row + 1u;
  var heads0 = no_keys_yet();
  var heads1 = heads0;
  var heads2 = heads0;
  var heads3 = heads0;
  // This split's keys [first_key, end_key) of the quad's last row, of which the caches
  // hold those before `cached` (ROPE_DECODE: all but the last, this call's); a row
  // attends the first keys + (its row - row) of them, each block's keys past that
  // weighted 0.
  let last_keys = keys + last_row - row;
  let chunk = (last_keys + p.splits - 1u) / p.splits;
  let first_key = split * chunk;
  let end_key = min(last_keys, first_key + chunk);
  let cached = select(end_key, min(end_key, keys - 1u), ROPE_DECODE);
  // Keys past `cached` in the last block: the last cached key again, weighted 0.
  let last = cached - 1u;  // read only where the loop runs, cached > 0
  for (var key = first_key; key < cached; key += KEY_BLOCK) {
    let base0 = (key * p.kv_heads + kv_head) * VEC4S;
    let base1 = (min(key + 1u, last) * p.kv_heads + kv_head) * VEC4S;
    let base2 = (min(key + 2u, last) * p.kv_heads + kv_head) * VEC4S;
    let base3 = (min(key + 3u, last) * p.kv_heads + kv_head) * VEC4S;
    // This lane's key, key + lane, against each row's keys (row r's: keys + r - row).
    let lane_key = key + lane;
    let k0 = cached_key(base0, first);
    let k1 = cached_key(base1, first);
    let k2 = cached_key(base2, first);
    let k3 = cached_key(base3, first);
    let weights0 = block_weights(&heads0, queries0, k0, k1, k2, k3, lane, lane_key < min(cached, keys));
    var weights1 = HeadWeights();
    var weights2 = HeadWeights();
    var weights3 = HeadWeights();
    if (QUAD_ROWS > 1u) {
      weights1 = block_weights(&heads1, queries1, k0, k1, k2, k3, lane, lane_key < min(cached, keys + 1u));
    }
    if (QUAD_ROWS > 2u) {
      weights2 = block_weights(&heads2, queries2, k0, k1, k2, k3, lane, lane_key < min(cached, keys + 2u));
      weights3 = block_weights(&heads3, queries3, k0, k1, k2, k3, lane, lane_key < min(cached, keys + 3u));
    }
    add_values(&heads0, &heads1, &heads2, &heads3, weights0, weights1, weights2, weights3, cached_value(base0, first), 0u);
    add_values(&heads0, &heads1, &heads2, &heads3, weights0, weights1, weights2, weights3, cached_value(base1, first), 1u);
    add_values(&heads0, &heads1, &heads2, &heads3, weights0, weights1, weights2, weights3, cached_value(base2, first), 2u);
    add_values(&heads0, &heads1, &heads2, &heads3, weights0, weights1, weights2, weights3, cached_value(base3, first), 3u);
  }
  total_sums(&heads0);
  if (QUAD_ROWS > 1u) {
    total_sums(&heads1);
  }
  if (QUAD_ROWS > 2u) {
    total_sums(&heads2);
    total_sums(&heads3);
  }
  if (ROPE_DECODE && end_key == keys) {
    let base = kv_head * VEC4S;
    let k = Dims(
      rotated(new_key_vec4(base, first), first), rotated(new_key_vec4(base, first + 1u), first + 1u),
      rotated(new_key_vec4(base, first + 2u), first + 2u), rotated(new_key_vec4(base, first + 3u), first + 3u),
    );
    let v = Dims(
      new_value_vec4(base, first), new_value_vec4(base, first + 1u), new_value_vec4(base, first + 2u), new_value_vec4(base, first + 3u),
    );
    attend_key(&heads0, queries0, k, v);
    let cache_base = (position.input_pos * p.kv_heads + kv_head) * VEC4S;
    store_new(cache_base, first, k.a, v.a);
    store_new(cache_base, first + 1u, k.b, v.b);
    store_new(cache_base, first + 2u, k.c, v.c);
    store_new(cache_base, first + 3u, k.d, v.d);
  }

  if (p.splits > 1u) {
    store_partials(heads0, (row * p.q_heads + first_head) * p.splits + split, first);
    return;
  }
  store_heads(heads0, q_base, first);
  if (QUAD_ROWS > 1u && row + 1u < p.seq_len) {
    store_heads(heads1, q_base + row_step, first);
  }
  if (QUAD_ROWS > 2u && row + 2u < p.seq_len) {
    store_heads(heads2, q_base + 2u * row_step, first);
  }
  if (QUAD_ROWS > 2u && row + 3u < p.seq_len) {
    store_heads(heads3, q_base + 3u * row_step, first);
  }
}
