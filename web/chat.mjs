// The chat page: checks WebGPU, fetches and verifies the model files (Cache API), hands
// the .pte to Python in a Web Worker (chat-worker.mjs) and streams its replies.
// Model output is only ever set as text (Text nodes / textContent), never as HTML.
import { DamagedModelError, DownloadError, fetchManifest, loadModelFile } from "./model-files.mjs";

const $ = (id) => document.getElementById(id);
const ui = {
  app: document.querySelector(".app"),
  modelName: $("model-name"),
  loader: $("loader"),
  loaderTitle: document.querySelector("#loader h2"),
  status: $("status"),
  progress: $("progress"),
  progressBar: document.querySelector("#progress .bar"),
  progressLabel: document.querySelector("#progress .progress-label"),
  conversation: $("conversation"),
  messages: $("messages"),
  empty: $("empty"),
  composer: $("composer"),
  prompt: $("prompt"),
  send: $("send"),
  stop: $("stop"),
  newChat: $("new-chat"),
  stats: $("stats"),
  settings: $("settings"),
  settingsToggle: $("settings-toggle"),
  systemPrompt: $("system-prompt"),
  systemPromptNote: $("system-prompt-note"),
  temperature: $("temperature"),
  temperatureValue: $("temperature-value"),
  maxTokens: $("max-tokens"),
};

const DEFAULT_MANIFEST = "models/smollm2-135m-instruct-4w.json";

// ?model=… picks another manifest (same origin only); ?max_tokens=… presets the reply length.
const params = new URLSearchParams(location.search);
const manifestUrl = new URL(params.get("model") ?? DEFAULT_MANIFEST, location.href);
if (params.has("max_tokens")) ui.maxTokens.value = params.get("max_tokens");

// --- formatting ----------------------------------------------------------------------

function formatBytes(n) {
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(0)} KB`;
  if (n < 1024 * 1024 * 1024) return `${(n / (1024 * 1024)).toFixed(1)} MB`;
  return `${(n / (1024 * 1024 * 1024)).toFixed(2)} GB`;
}

function formatSeconds(s) {
  return s < 1 ? `${Math.round(s * 1000)} ms` : `${s.toFixed(2)} s`;
}

// --- page state ------------------------------------------------------------------------

// phase: loading → ready ⇄ streaming; failed is final (reload to recover).
let phase = "loading";
let worker = null;
let turn = null; // the reply being streamed: {id, element, text (Text node), pieces}
let nextTurnId = 1;
let chatHasTurns = false;
let sessionSystemPrompt = "";
let resetWhenIdle = false;
let modelName = "the model";

function setStatus(text, state = "busy") {
  ui.status.textContent = text;
  ui.status.dataset.state = state;
  ui.loader.hidden = state === "ok";
  ui.loader.dataset.state = state;
  ui.loaderTitle.textContent = state === "error" ? "The chat cannot run" : "Getting the model ready";
}

function updateControls() {
  const ready = phase === "ready";
  const streaming = phase === "streaming";
  ui.prompt.disabled = !(ready || streaming);
  ui.prompt.placeholder = phase === "failed" ? "The model is not available" : phase === "loading" ? "Loading the model…" : `Message ${modelName}…`;
  ui.send.disabled = !ready || !ui.prompt.value.trim();
  ui.send.hidden = streaming;
  ui.stop.hidden = !streaming;
  ui.newChat.disabled = !(ready || streaming);
  ui.empty.hidden = !(ready || streaming) || chatHasTurns;
  for (const button of document.querySelectorAll(".suggestion")) button.disabled = !ready;
  ui.app.dataset.phase = phase;
}

function fail(message) {
  if (phase === "failed") return; // the first error is the one that explains the others
  phase = "failed";
  setStatus(message, "error");
  ui.progress.hidden = true;
  if (turn) finishTurn("error", message);
  updateControls();
}

// --- messages --------------------------------------------------------------------------

function scrollToEnd(force = false) {
  const c = ui.conversation;
  // Follow the stream only while the reader is at the bottom already.
  if (force || c.scrollHeight - c.scrollTop - c.clientHeight < 120) c.scrollTop = c.scrollHeight;
}

function addMessage(role, text) {
  const element = document.createElement("article");
  element.className = `message ${role}`;
  const body = document.createElement("div");
  body.className = "body";
  const textNode = document.createTextNode(text);
  body.append(textNode);
  element.append(body);
  ui.messages.append(element);
  return { element, body, textNode };
}

function finishTurn(state, errorMessage) {
  const { element, body } = turn;
  element.dataset.state = state;
  if (errorMessage) {
    const note = document.createElement("p");
    note.className = "error-note";
    note.textContent = errorMessage;
    body.after(note);
  }
  turn = null;
}

function showStats(stats, element) {
  const parts = [];
  if (stats.time_to_first_token_s != null) parts.push(`first token ${formatSeconds(stats.time_to_first_token_s)}`);
  if (stats.decode_tokens_per_s != null) parts.push(`${stats.decode_tokens_per_s.toFixed(1)} tokens/s`);
  parts.push(`${stats.decode_tokens} tokens`);
  parts.push(`prompt ${stats.prompt_tokens} tokens (${stats.prefilled_tokens} new)`);
  const reasons = { eos: "", max_tokens: "reply length limit", cancelled: "stopped", context_full: "the conversation fills the model's context: start a new chat", stop_string: "" };
  if (reasons[stats.stop_reason]) parts.push(reasons[stats.stop_reason]);
  ui.stats.textContent = parts.join(" · ");
  // Stable hooks for tests and tools.
  Object.assign(ui.stats.dataset, {
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

// --- talking to the worker ---------------------------------------------------------------

function send(text) {
  text = text.trim();
  if (!text || phase !== "ready") return;
  if (!chatHasTurns && ui.systemPrompt.value !== sessionSystemPrompt) resetChat();
  chatHasTurns = true;
  addMessage("user", text);
  const { element, body, textNode } = addMessage("assistant", "");
  element.dataset.state = "streaming";
  turn = { id: nextTurnId++, element, body, text: textNode, pieces: 0 };
  ui.prompt.value = "";
  autosize();
  ui.stats.textContent = "";
  phase = "streaming";
  updateControls();
  scrollToEnd(true);
  worker.postMessage({
    type: "send",
    id: turn.id,
    text,
    temperature: Number(ui.temperature.value),
    maxTokens: Math.max(1, Math.floor(Number(ui.maxTokens.value) || 256)),
  });
}

function stop() {
  if (phase === "streaming") worker.postMessage({ type: "cancel" });
}

function resetChat() {
  sessionSystemPrompt = ui.systemPrompt.value;
  worker.postMessage({ type: "reset", systemPrompt: sessionSystemPrompt });
  ui.messages.replaceChildren();
  ui.stats.textContent = "";
  for (const key of Object.keys(ui.stats.dataset)) delete ui.stats.dataset[key];
  chatHasTurns = false;
  ui.systemPromptNote.hidden = true;
}

function newChat() {
  if (phase === "streaming") {
    resetWhenIdle = true; // after the worker confirms the stop
    stop();
    return;
  }
  if (phase === "ready") resetChat();
  updateControls();
  ui.prompt.focus();
}

const ERROR_TEXT = {
  boot: (m) => m,
  "model-file": (m) => `The model could not be loaded: ${m}. Reload the page to download it again.`,
  "device-lost": (m) => `The GPU stopped working for this page (${m}). This happens when the graphics driver restarts or the GPU runs out of memory. Reload the page to start again.`,
  gpu: (m) => `The GPU could not run the model: ${m}`,
  internal: (m) => `Something went wrong: ${m}`,
};

function onWorkerMessage({ data }) {
  switch (data.type) {
    case "status":
      if (phase === "loading") workerStatus(data.text);
      return;
    case "ready":
      phase = "ready";
      document.body.dataset.ready = "1";
      setStatus(`Ready: loaded in ${data.loadSeconds.toFixed(1)} s on ${data.adapter}.`, "ok");
      ui.stats.textContent = `Model ready on ${data.adapter} (loaded in ${data.loadSeconds.toFixed(1)} s)`;
      updateControls();
      ui.prompt.focus();
      return;
    case "token":
      if (turn && data.id === turn.id) {
        turn.text.appendData(data.text);
        turn.pieces += 1;
        scrollToEnd();
      }
      return;
    case "done": {
      if (!turn || data.id !== turn.id) return;
      const element = turn.element;
      finishTurn(data.stats.stop_reason === "cancelled" ? "stopped" : "done");
      showStats(data.stats, element);
      phase = "ready";
      if (resetWhenIdle) {
        resetWhenIdle = false;
        resetChat();
      }
      updateControls();
      scrollToEnd();
      return;
    }
    case "error": {
      const message = (ERROR_TEXT[data.kind] ?? ERROR_TEXT.internal)(data.message);
      // An error in one reply leaves the model usable, unless the GPU itself is gone.
      if (turn && data.id === turn.id && data.kind !== "device-lost") {
        finishTurn("error", message);
        phase = "ready";
        updateControls();
        return;
      }
      fail(message);
      return;
    }
  }
}

// Worker status lines (Python start-up) wait until the download has said its piece.
let downloading = true;
let lastWorkerStatus = "Starting Python…";
function workerStatus(text) {
  lastWorkerStatus = text;
  if (!downloading) setStatus(text);
}

// --- start-up ----------------------------------------------------------------------------

async function checkWebGPU(manifest) {
  if (!navigator.gpu) {
    throw new Error(
      "This browser does not offer WebGPU (navigator.gpu is missing), which the model needs to run on your GPU. " +
        "Use a recent Chrome, Edge or Safari, or turn WebGPU on in your browser's settings; the page must come from localhost or https.",
    );
  }
  const adapter = await navigator.gpu.requestAdapter({ powerPreference: "high-performance" });
  if (!adapter) {
    throw new Error(
      "This browser supports WebGPU but found no usable GPU (it may be blocklisted, or hardware acceleration is off). " +
        "Check chrome://gpu or your browser's settings.",
    );
  }
  if (manifest) {
    // The packed embedding (also the tied output layer) is the largest single buffer.
    const { vocab_size: vocab, dim } = manifest.model;
    const needed = manifest.quantization?.embedding ? (vocab * dim) / 2 : vocab * dim * 4;
    const allowed = Math.min(adapter.limits.maxBufferSize, adapter.limits.maxStorageBufferBindingSize);
    if (allowed < needed) {
      throw new Error(
        `This GPU is too small for the model: it allows buffers of at most ${formatBytes(allowed)}, and the model needs one of ${formatBytes(needed)}.`,
      );
    }
  }
  return adapter;
}

function showProgress(done, total) {
  const percent = total ? Math.floor((done / total) * 100) : 0;
  ui.progress.hidden = false;
  ui.progress.dataset.state = "downloading";
  ui.progress.dataset.bytes = done;
  ui.progress.dataset.total = total;
  ui.progressBar.style.width = `${percent}%`;
  ui.progressLabel.textContent = `${formatBytes(done)} of ${formatBytes(total)} · ${percent}%`;
}

async function start() {
  updateControls();
  if (manifestUrl.origin !== location.origin) {
    fail("The ?model= parameter must name a manifest on this site.");
    return;
  }
  let manifest;
  try {
    setStatus("Checking WebGPU…");
    await checkWebGPU();
    setStatus("Downloading the model's manifest…");
    manifest = await fetchManifest(manifestUrl.href);
    await checkWebGPU(manifest);
  } catch (error) {
    fail(error.message);
    return;
  }
  // "SmolLM2-135M-Instruct.Q4_1.gguf" → "SmolLM2-135M-Instruct"; else the .pte name.
  modelName = (manifest.source?.file ?? manifest.pte.file).split(".")[0];
  const bits = manifest.quantization?.mode === "fp32" ? "fp32" : "4-bit";
  ui.modelName.textContent = `${modelName} · ${formatBytes(manifest.pte.bytes)} · ${bits} · WebGPU`;

  // Python starts in the worker while the page downloads: both take seconds.
  worker = new Worker(new URL("./chat-worker.mjs", import.meta.url), { type: "module" });
  worker.onmessage = onWorkerMessage;
  worker.onerror = (event) => fail(`The chat worker failed: ${event.message ?? "unknown error"}`);

  let file;
  try {
    file = await loadModelFile(manifestUrl.href, manifest, { onProgress: showProgress, onStatus: (text) => setStatus(text) });
  } catch (error) {
    fail(error instanceof DamagedModelError || error instanceof DownloadError ? error.message : `The model could not be loaded: ${error.message}`);
    worker.terminate();
    return;
  }
  ui.progress.dataset.state = file.fromCache ? "cached" : "done";
  ui.progress.dataset.fromCache = file.fromCache ? "1" : "0";
  if (file.fromCache) ui.progress.hidden = true;
  downloading = false;
  setStatus(lastWorkerStatus);
  sessionSystemPrompt = ui.systemPrompt.value;
  // Transferred, not copied: the page keeps no second copy of the weights.
  worker.postMessage({ type: "load", manifestUrl: manifestUrl.href, pte: file.buffer, systemPrompt: sessionSystemPrompt }, [file.buffer]);
}

// --- controls ------------------------------------------------------------------------------

function autosize() {
  ui.prompt.style.height = "auto";
  ui.prompt.style.height = `${Math.min(ui.prompt.scrollHeight, 200)}px`;
}

ui.composer.addEventListener("submit", (event) => {
  event.preventDefault();
  send(ui.prompt.value);
});
ui.prompt.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    send(ui.prompt.value);
  }
});
ui.prompt.addEventListener("input", () => {
  autosize();
  updateControls();
});
ui.stop.addEventListener("click", stop);
ui.newChat.addEventListener("click", newChat);
for (const button of document.querySelectorAll(".suggestion")) button.addEventListener("click", () => send(button.textContent));

ui.settingsToggle.addEventListener("click", () => {
  ui.settings.hidden = !ui.settings.hidden;
  ui.settingsToggle.setAttribute("aria-expanded", String(!ui.settings.hidden));
});
ui.temperature.addEventListener("input", () => {
  ui.temperatureValue.textContent = Number(ui.temperature.value).toFixed(1);
});
ui.systemPrompt.addEventListener("input", () => {
  ui.systemPromptNote.hidden = !chatHasTurns || ui.systemPrompt.value === sessionSystemPrompt;
});
ui.systemPromptNote.hidden = true;
// The browser may restore the slider's value on reload; its label must follow.
ui.temperatureValue.textContent = Number(ui.temperature.value).toFixed(1);

start();
