// The chat page: checks WebGPU, lets the reader pick the model (model-picker.mjs), fetches
// or reads and verifies its files (model-files.mjs, Cache API), hands the .pte to Python
// in a Web Worker (chat-worker.mjs) and streams its replies.
// Model output, user text and file names are only ever set as text (Text nodes /
// textContent), never as HTML.
import * as loader from "./load-view.mjs";
import { DamagedModelError, DownloadError, LOCAL_FILES, loadModelFile, readLocalModelFile } from "./model-files.mjs";
import { adapterLimits, formatBytes, requestAdapter } from "./model-fit.mjs";
import { BUNDLED_MANIFEST, choiceFromUrl, initPicker } from "./model-picker.mjs";
import { showStats } from "./reply-stats.mjs";

const $ = (id) => document.getElementById(id);
const ui = {
  app: document.querySelector(".app"),
  modelName: $("model-name"),
  conversation: $("conversation"),
  messages: $("messages"),
  empty: $("empty"),
  composer: $("composer"),
  prompt: $("prompt"),
  send: $("send"),
  stop: $("stop"),
  newChat: $("new-chat"),
  notice: $("notice"),
  noticeText: $("notice-text"),
  reloadModel: $("reload-model"),
  stats: $("stats"),
  settings: $("settings"),
  settingsToggle: $("settings-toggle"),
  systemPrompt: $("system-prompt"),
  systemPromptNote: $("system-prompt-note"),
  temperature: $("temperature"),
  temperatureValue: $("temperature-value"),
  maxTokens: $("max-tokens"),
};

// ?model=… opens another manifest (same origin only); ?pick opens the model picker and
// loads nothing; ?max_tokens=… presets the reply length.
const params = new URLSearchParams(location.search);
if (params.has("max_tokens")) ui.maxTokens.value = params.get("max_tokens");

// --- page state ------------------------------------------------------------------------

// phase: loading → ready ⇄ streaming; failed (the load failed) and lost (the GPU device
// was lost) last until another load.
let phase = "loading";
let worker = null;
let limits = null; // the adapter's (model-fit.mjs's adapterLimits)
let loaded = null; // the model choice being loaded or loaded (model-picker.mjs)
let loadAbort = null; // aborts the load in progress when another starts
let turn = null; // the reply being streamed: {id, element, text (Text node), pieces}
let nextTurnId = 1;
let chatHasTurns = false;
let sessionSystemPrompt = "";
let resetWhenIdle = false;
let modelName = "the model";
let picker = null;

function updateControls() {
  const ready = phase === "ready";
  const streaming = phase === "streaming";
  ui.prompt.disabled = !(ready || streaming);
  const placeholders = { failed: "The model is not available", lost: "The model needs reloading", loading: "Loading the model…" };
  ui.prompt.placeholder = placeholders[phase] ?? `Message ${modelName}…`;
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
  loader.setStatus(message, "error");
  loader.hideProgress();
  if (turn) finishTurn("error", message);
  updateControls();
}

// The GPU device is gone: the reply ends with `message`, the conversation stays on the
// page, and the model can be loaded again (a new worker, a new device).
function lose(message) {
  if (phase === "lost" || phase === "failed") return;
  if (phase === "loading") return fail(message);
  phase = "lost";
  if (turn) finishTurn("error", message);
  ui.noticeText.textContent = message;
  ui.reloadModel.hidden = false;
  ui.notice.hidden = false;
  updateControls();
}

// Something the reader should know that needs no reload (the model could not be cached).
function note(message) {
  ui.noticeText.textContent = message;
  ui.reloadModel.hidden = true;
  ui.notice.hidden = false;
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
  "device-lost": (m) => `The GPU stopped working for this page (${m}). This happens when the graphics driver restarts or the GPU runs out of memory. Reload the model to go on.`,
  gpu: (m) => `The GPU could not run the model: ${m}`,
  internal: (m) => `Something went wrong: ${m}`,
};

function onWorkerMessage({ data }) {
  switch (data.type) {
    case "status":
      if (phase === "loading") workerStatus(data.text);
      return;
    case "stage":
      loader.enterStage(data.name);
      return;
    case "ready":
      phase = "ready";
      loader.enterStage(null);
      document.body.dataset.ready = "1";
      loader.setStatus(`Ready: loaded in ${data.loadSeconds.toFixed(1)} s on ${data.adapter}.`, "ok");
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
      showStats(ui.stats, data.stats, element);
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
      if (data.kind === "device-lost") return lose(message);
      if (turn && data.id === turn.id) {
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
  if (!downloading) loader.setStatus(text);
}

// --- start-up ----------------------------------------------------------------------------

// The conversation and its controls as before any model.
function clearConversation() {
  turn = null;
  resetWhenIdle = false;
  chatHasTurns = false;
  ui.messages.replaceChildren();
  ui.stats.textContent = "";
  for (const key of Object.keys(ui.stats.dataset)) delete ui.stats.dataset[key];
  ui.notice.hidden = true;
  delete document.body.dataset.ready;
}

// Loads `choice` in a new worker (the one before, and its GPU device, go): refused before
// anything is downloaded when it cannot fit the adapter.
async function loadModel(choice) {
  loadAbort?.abort();
  const abort = (loadAbort = new AbortController());
  worker?.terminate();
  worker = null;
  clearConversation();
  phase = "loading";
  loaded = choice;
  modelName = choice.name;
  updateControls();
  loader.showFacts(choice, limits);
  if (choice.problem) return fail(choice.problem);
  const { manifest } = choice;
  const bits = manifest.quantization?.mode === "fp32" ? "fp32" : "4-bit";
  ui.modelName.textContent = `${modelName} · ${formatBytes(manifest.pte.bytes)} · ${bits} · WebGPU`;
  loader.resetStages(choice.source === "local");
  loader.enterStage("download");

  // Python starts in the worker while the page downloads: both take seconds.
  const started = new Worker(new URL("./chat-worker.mjs", import.meta.url), { type: "module" });
  worker = started;
  started.onmessage = (event) => worker === started && onWorkerMessage(event);
  started.onerror = (event) => worker === started && fail(`The chat worker failed: ${event.message ?? "unknown error"}`);
  downloading = true;
  lastWorkerStatus = "Starting Python…";

  let file;
  try {
    if (choice.source === "local" && manifest.pte.chunk_sha256) {
      // The worker reads the File piece by piece, each checked against its chunk's sha256.
      file = { blob: choice.pteFile, fromCache: false };
    } else if (choice.source === "local") {
      loader.setStatus(`Reading ${choice.pteFile.name}…`);
      file = { buffer: await readLocalModelFile(choice.pteFile, manifest, { onProgress: loader.showProgress }), fromCache: false };
    } else {
      const options = { name: modelName, signal: abort.signal, onProgress: loader.showProgress, onStatus: (text) => loader.setStatus(text) };
      file = await loadModelFile(choice.manifestUrl, manifest, options);
    }
  } catch (error) {
    if (abort.signal.aborted) return; // another load took over
    fail(error instanceof DamagedModelError || error instanceof DownloadError ? error.message : `The model could not be loaded: ${error.message}`);
    started.terminate();
    return;
  }
  if (abort.signal.aborted) return;
  loader.progressDone(file.fromCache);
  if (file.notKept) note(file.notKept);
  if (!file.fromCache) picker.refreshCached();
  downloading = false;
  loader.setStatus(lastWorkerStatus);
  sessionSystemPrompt = ui.systemPrompt.value;
  const load = { type: "load", manifestUrl: choice.manifestUrl, pte: file.buffer ?? file.blob, checked: !file.blob, systemPrompt: sessionSystemPrompt };
  if (choice.source === "local") {
    // The worker answers Python's fetches of these two from the Files (chat-worker.mjs).
    load.manifestUrl = LOCAL_FILES + encodeURIComponent(choice.manifestFile.name);
    load.localFiles = { [choice.manifestFile.name]: choice.manifestFile, [choice.manifest.tokenizer.file]: choice.tokenizerFile };
  }
  // Transferred, not copied: the page keeps no second copy of the weights.
  started.postMessage(load, file.buffer ? [file.buffer] : []);
}

async function start() {
  updateControls();
  let adapter;
  try {
    loader.setStatus("Checking WebGPU…");
    adapter = await requestAdapter();
  } catch (error) {
    fail(error.message);
    return;
  }
  limits = adapterLimits(adapter);
  picker = initPicker({ limits, onLoad: loadModel });
  loader.onPickAnother(picker.open);
  ui.reloadModel.addEventListener("click", () => loadModel(loaded));
  if (params.has("pick")) {
    loader.setStatus("Choose a model: the bundled one, a manifest URL or your own files.", "idle");
    picker.open();
    return;
  }
  let choice;
  try {
    loader.setStatus("Downloading the model's manifest…");
    choice = await choiceFromUrl(params.get("model") ?? BUNDLED_MANIFEST, limits);
  } catch (error) {
    fail(error.message);
    return;
  }
  loadModel(choice);
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
