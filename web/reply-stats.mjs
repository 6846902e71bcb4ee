// The figures of a finished reply, as the chat page shows them.

function formatSeconds(s) {
  return s < 1 ? `${Math.round(s * 1000)} ms` : `${s.toFixed(2)} s`;
}

// A finished reply's figures: in the stats line (`line`, whose dataset holds them for tests
// and tools) and under the reply (`element`).
export function showStats(line, stats, element) {
  const parts = [];
  if (stats.time_to_first_token_s != null) parts.push(`first token ${formatSeconds(stats.time_to_first_token_s)}`);
  if (stats.decode_tokens_per_s != null) parts.push(`${stats.decode_tokens_per_s.toFixed(1)} tokens/s`);
  parts.push(`${stats.decode_tokens} tokens`);
  parts.push(`prompt ${stats.prompt_tokens} tokens (${stats.prefilled_tokens} new)`);
  const reasons = { eos: "", max_tokens: "reply length limit", cancelled: "stopped", context_full: "the conversation fills the model's context: start a new chat", stop_string: "" };
  if (reasons[stats.stop_reason]) parts.push(reasons[stats.stop_reason]);
  line.textContent = parts.join(" · ");
  // Stable hooks for tests and tools.
  Object.assign(line.dataset, {
    promptTokens: stats.prompt_tokens,
    prefilledTokens: stats.prefilled_tokens,
    decodeTokens: stats.decode_tokens,
    ttftS: stats.time_to_first_token_s ?? "",
    tokensPerS: stats.decode_tokens_per_s ?? "",
    stopReason: stats.stop_reason,
  });
  const meta = document.createElement("footer");
  meta.className = "meta";
  meta.textContent = parts.slice(0, 3).join(" · ");
  element.append(meta);
}
