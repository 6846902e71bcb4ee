// The chat page's loader card: the status line, the model's facts, the download bar and
// the load's stages, each stage marked as the page or the worker reaches it.
import { formatBytes } from "./model-fit.mjs";

const $ = (id) => document.getElementById(id);
const ui = {
  loader: $("loader"),
  title: document.querySelector("#loader h2"),
  status: $("status"),
  facts: $("model-facts"),
  progress: $("progress"),
  bar: document.querySelector("#progress .bar"),
  label: document.querySelector("#progress .progress-label"),
  stages: $("load-stages"),
  pick: $("loader-pick"),
};
const stageItems = [...ui.stages.querySelectorAll("li")];
const DOWNLOAD_LABEL = stageItems[0].textContent;

let activeStage = null; // {item, started}

export function setStatus(text, state = "busy") {
  ui.status.textContent = text;
  ui.status.dataset.state = state;
  ui.loader.hidden = state === "ok";
  ui.loader.dataset.state = state;
  ui.title.textContent = state === "error" ? "The chat cannot run" : "Getting the model ready";
  ui.pick.hidden = state !== "error";
}

export const statusState = () => ui.status.dataset.state;

// The model's size and the adapter's limits, shown before the download starts.
export function showFacts(choice, limits) {
  const bytes = choice.manifest.pte.bytes;
  ui.facts.textContent =
    `${choice.name}: ${formatBytes(bytes)}. ${limits.description} allows buffers of ${formatBytes(limits.maxBufferSize)} ` +
    `and storage bindings of ${formatBytes(limits.maxStorageBufferBindingSize)}.`;
  ui.facts.dataset.bytes = bytes;
  ui.facts.hidden = false;
}

export function showProgress(done, total) {
  const percent = total ? Math.floor((done / total) * 100) : 0;
  ui.progress.hidden = false;
  ui.progress.dataset.state = "downloading";
  ui.progress.dataset.bytes = done;
  ui.progress.dataset.total = total;
  ui.bar.style.width = `${percent}%`;
  ui.label.textContent = `${formatBytes(done)} of ${formatBytes(total)} · ${percent}%`;
}

// The file is in: from the cache (the bar was never needed), downloaded or read locally.
export function progressDone(fromCache) {
  ui.progress.dataset.state = fromCache ? "cached" : "done";
  ui.progress.dataset.fromCache = fromCache ? "1" : "0";
  if (fromCache) ui.progress.hidden = true;
}

export function hideProgress() {
  ui.progress.hidden = true;
}

// A new load: every stage pending, the first one named for where the file comes from.
export function resetStages(local) {
  activeStage = null;
  for (const item of stageItems) {
    item.dataset.state = "pending";
    delete item.dataset.seconds;
  }
  stageItems[0].textContent = local ? "Reading the model file" : DOWNLOAD_LABEL;
  ui.stages.hidden = false;
  ui.progress.hidden = true;
  delete ui.progress.dataset.fromCache;
}

// Marks the stage `name` active and the one before done (with its seconds); null: all done.
export function enterStage(name) {
  const now = performance.now();
  if (activeStage) {
    activeStage.item.dataset.state = "done";
    activeStage.item.dataset.seconds = ((now - activeStage.started) / 1000).toFixed(1);
  }
  const item = stageItems.find((i) => i.dataset.stage === name);
  activeStage = item ? { item, started: now } : null;
  if (item) item.dataset.state = "active";
}

export const onPickAnother = (handler) => ui.pick.addEventListener("click", handler);
