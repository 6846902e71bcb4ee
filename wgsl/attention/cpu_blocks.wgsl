// The CPU attention kernel's steps over blocks of KEY_BLOCK cached keys, for the quad's
// QUAD_ROWS rows of QUAD_HEADS heads.
#include "attention/cpu_quad.wgsl"

// Query rows per quad, 1, 2 or 4: every key and value the quad loads serves all their heads.
override QUAD_ROWS: u32 = 1u;

// The loop over cached keys takes them KEY_BLOCK at a time: lane j of the quad ends up
// with the whole score of the block's key j, so a head's softmax costs two exps per block
// (the rescale, and the four keys' weights side by side in the lanes) where it cost two
// per key in every lane, and its weighted values are rescaled once per block.
const KEY_BLOCK: u32 = 4u;

// Lane j's whole score of the block's key j, from each lane's partial dots with the
// block's 4 keys (`partial`): a reduce-scatter over the quad in three swaps (pairs of
// lanes first add up the keys of their parity, then of their half).
fn block_score(partial: vec4<f32>, lane: u32) -> f32 {
  let odd = (lane & 1u) != 0u;
  let upper = (lane & 2u) != 0u;
  let pair = select(partial.xz, partial.yw, odd) + quadSwapX(select(partial.yw, partial.xz, odd));
  return select(pair.x, pair.y, upper) + quadSwapY(select(pair.y, pair.x, upper));
}

// A head's partial dots with the block's keys.
fn block_partials(query: Dims, k0: Dims, k1: Dims, k2: Dims, k3: Dims) -> vec4<f32> {
  return vec4<f32>(lane_dot(query, k0), lane_dot(query, k1), lane_dot(query, k2), lane_dot(query, k3));
}

// A head and this lane's weight of the block's key (block_weights).
struct BlockStep {
  head: Head,
  weight: f32,
}

// A head with the block's scores (lane j's of key j; past the row's keys, `valid` false):
// its running max moved to the block's, what it has summed rescaled, the lane's weight
// added to the lane's share of the weight sum (added up over the quad by total_sums).
fn rescaled_for_block(head: Head, lane_score: f32, valid: bool) -> BlockStep {
  let masked = select(LOWEST, lane_score, valid);
  var block_max = max(masked, quadSwapX(masked));
  block_max = max(block_max, quadSwapY(block_max));
  let new_max = max(head.running_max, block_max);
  let rescale = exp(head.running_max - new_max);
  let weight = select(0.0, exp(masked - new_max), valid);
  let acc = Dims(head.acc.a * rescale, head.acc.b * rescale, head.acc.c * rescale, head.acc.d * rescale);
  return BlockStep(Head(new_max, head.weight_sum * rescale + weight, acc), weight);
}

// The weights of a row's heads (up to 4) for one key of a block.
struct HeadWeights {
  h0: f32,
  h1: f32,
  h2: f32,
  h3: f32,
}

// Lane j's weights of the block's key j for a row's heads, their sums rescaled to the
// block's max: all heads' partial dots, then scores, then softmax steps, written side by
// side (see attend_key).
fn block_weights(
  heads: ptr<function, RowHeads>, queries: RowQueries, k0: Dims, k1: Dims, k2: Dims, k3: Dims, lane: u32, valid: bool,
) -> HeadWeights {
  let p0 = block_partials(queries.q0, k0, k1, k2, k3);
  var p1 = vec4<f32>();
  var p2 = vec4<f32>();
  var p3 = vec4<f32>();
  if (QUAD_HEADS > 1u) {
    p1 = block_partials(queries.q1, k0, k1, k2, k3);
  }
  if (QUAD_HEADS > 2u) {
    p2 = block_partials(queries.q2, k0, k1, k2, k3);
  }
  if (QUAD_HEADS > 3u) {
    p3 = block_partials(queries.q3, k0, k1, k2, k3);
  }
  let s0 = block_score(p0, lane);
  var s1 = 0.0;
  var s2 = 0.0;
  var s3 = 0.0;
  if (QUAD_HEADS > 1u) {
    s1 = block_score(p1, lane);
  }
  if (QUAD_HEADS > 2u) {
    s2 = block_score(p2, lane);
  }
  if (QUAD_HEADS > 3u) {
    s3 = block_score(p3, lane);
  }
  var weights = HeadWeights();
  let b0 = rescaled_for_block((*heads).h0, s0, valid);
  (*heads).h0 = b0.head;
  weights.h0 = b0.weight;
  if (QUAD_HEADS > 1u) {
    let b1 = rescaled_for_block((*heads).h1, s1, valid);
    (*heads).h1 = b1.head;
    weights.h1 = b1.weight;
  }
  if (QUAD_HEADS > 2u) {
    let b2 = rescaled_for_block((*heads).h2, s2, valid);
    (*heads).h2 = b2.head;
    weights.h2 = b2.weight;
  }
  if (QUAD_HEADS > 3u) {
    let b3 = rescaled_for_block((*heads).h3, s3, valid);
    (*heads).h3 = b3.head;
    weights.h3 = b3.weight;
  }
  return weights;
}

// `acc` plus `weight` times (this lane's dims of) `value`.
fn plus_weighted(acc: Dims, weight: f32, value: Dims) -> Dims {
  return Dims(acc.a + weight * value.a, acc.b + weight * value.b, acc.c + weight * value.c, acc.d + weight * value.d);
}

// Lane `index`'s `weight`, in every lane of the quad.
fn quad_weight(weight: f32, index: u32) -> f32 {
  switch (index) {
    case 0u: { return quadBroadcast(weight, 0u); }
    case 1u: { return quadBroadcast(weight, 1u); }
    case 2u: { return quadBroadcast(weight, 2u); }
    default: { return quadBroadcast(weight, 3u); }
  }
}

// A row's heads with the value of the block's key `index` (its weights from lane
// `index`; a constant, as quadBroadcast asks).
fn add_block_value(heads: ptr<function, RowHeads>, weights: HeadWeights, value: Dims, index: u32) {
  (*heads).h0.acc = plus_weighted((*heads).h0.acc, quad_weight(weights.h0, index), value);
  if (QUAD_HEADS > 1u) {
    (*heads).h1.acc = plus_weighted((*heads).h1.acc, quad_weight(weights.h1, index), value);
  }
  if (QUAD_HEADS > 2u) {
    (*heads).h2.acc = plus_weighted((*heads).h2.acc, quad_weight(weights.h2, index), value);
  }
  if (QUAD_HEADS > 3u) {
    (*heads).h3.acc = plus_weighted((*heads).h3.acc, quad_weight(weights.h3, index), value);
  }
}

// After the blocks: a head's weight sum, the lanes' shares added up.
fn quad_total(sum: f32) -> f32 {
  let pair = sum + quadSwapX(sum);
  return pair + quadSwapY(pair);
}

fn total_sums(heads: ptr<function, RowHeads>) {
  (*heads).h0.weight_sum = quad_total((*heads).h0.weight_sum);
  (*heads).h1.weight_sum = quad_total((*heads).h1.weight_sum);
  (*heads).h2.weight_sum = quad_total((*heads).h2.weight_sum);
  (*heads).h3.weight_sum = quad_total((*heads).h3.weight_sum);
}

// The quad's rows' heads with the value of the block's key `index` (add_block_value).
fn add_values(
  heads0: ptr<function, RowHeads>, heads1: ptr<function, RowHeads>, heads2: ptr<function, RowHeads>,
  heads3: ptr<function, RowHeads>, weights0: HeadWeights, weights1: HeadWeights, weights2: HeadWeights,
  weights3: HeadWeights, value: Dims, index: u32,
) {
  add_block_value(heads0, weights0, value, index);
  if (QUAD_ROWS > 1u) {
    add_block_value(heads1, weights1, value, index);
  }
  if (QUAD_ROWS > 2u) {
    add_block_value(heads2, weights2, value, index);
    add_block_value(heads3, weights3, value, index);
  }
}
