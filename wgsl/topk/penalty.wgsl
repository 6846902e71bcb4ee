// The repetition penalty (as in CTRL / Hugging Face) over a window of the last tokens fed:
// apply_penalty rescales those tokens' logits in place before the top-k passes, and
// append_pick extends the window by the run's token on the GPU, so that the next step,
// which takes that token on the GPU, penalizes it too.
#include "topk/order.wgsl"

@group(0) @binding(3) var<storage, read_write> result: array<vec2<u32>>;  // the picks, the drawn one at K_MAX
@group(0) @binding(4) var<storage, read_write> penalized_logits: array<f32>;
// The tokens fed, a ring of RING ids, then the count ever written (the next slot is
// count % RING). The penalty's window: the last min(count, WINDOW) of them.
@group(0) @binding(5) var<storage, read_write> history: array<u32>;

override K_MAX: u32 = 64u;
override RING: u32 = 512u;  // twice the window
override WINDOW: u32 = 256u;  // the most tokens penalized

// A thread per place in the window; each token once, at its last place there.
// Grid: WINDOW / 64 workgroups.
@compute @workgroup_size(64)
fn apply_penalty(@builtin(global_invocation_id) gid: vec3<u32>) {
  let count = history[RING];
  let length = min(count, WINDOW);
  if (gid.x >= length) {
    return;
  }
  let at = count - length + gid.x;
  let i = history[at % RING];
  for (var later = at + 1u; later < count; later++) {
    if (history[later % RING] == i) {
      return;
    }
  }
  if (i < p.n) {
    let v = penalized_logits[i];
    penalized_logits[i] = select(v * p.penalty, v / p.penalty, v > 0.0);
  }
}

// The run's token (its top 1, or the one sample_pick drew) appended to the window.
@compute @workgroup_size(1)
fn append_pick() {
  let count = history[RING];
  history[count % RING] = result[select(0u, K_MAX, p.drawn != 0u)].y;
  history[RING] = count + 1u;
}
