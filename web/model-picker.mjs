// The chat page's model picker: the bundled model, a manifest URL on this site, or the
// reader's own files (picked or dropped, read in the page, never uploaded); each choice
// shows the model's size and the adapter's limits before anything is downloaded, and is
// refused there when it cannot fit. Also the list of cached models, each deletable.
// Every name shown comes from a manifest or a file: set as text only.
import { deleteCachedModel, fetchManifest, listCachedModels, ManifestError, parseManifest } from "./model-files.mjs";
import { fitProblem, formatBytes } from "./model-fit.mjs";

export const BUNDLED_MANIFEST = "models/smollm2-135m-instruct-4w.json";

// "SmolLM2-135M-Instruct.Q4_1.gguf" → "SmolLM2-135M-Instruct"; else the .pte's name.
export const modelNameOf = (manifest) => (manifest.source?.file ?? manifest.pte.file).split(".")[0];

// A model to load: {source: "url", manifestUrl, manifest} or {source: "local", manifest,
// manifestFile, pteFile, tokenizerFile}, with its name and why it cannot fit this adapter (or null).
function choice(fields, limits) {
  return { ...fields, name: modelNameOf(fields.manifest), problem: fitProblem(fields.manifest, limits) };
}

export async function choiceFromUrl(url, limits) {
  const manifestUrl = new URL(url, location.href);
  if (manifestUrl.origin !== location.origin) {
    throw new Error(`The manifest must be on this site (${location.origin}), not at ${manifestUrl.origin}.`);
  }
  return choice({ source: "url", manifestUrl: manifestUrl.href, manifest: await fetchManifest(manifestUrl.href) }, limits);
}

// The manifest, .pte and tokenizer among `files`: the manifest is the .json that reads as
// one; the others are the files it names, or the only candidates there are.
export async function choiceFromFiles(files, limits) {
  files = [...files];
  const jsons = files.filter((f) => f.name.endsWith(".json")).sort((a, b) => a.size - b.size);
  let manifestFile = null;
  let manifest = null;
  let firstError = null;
  for (const file of jsons) {
    try {
      manifest = parseManifest(await file.text(), file.name);
      manifestFile = file;
      break;
    } catch (error) {
      if (!(error instanceof ManifestError)) throw error;
      firstError ??= error;
    }
  }
  if (!manifest) throw firstError ?? new Error("None of the files is a model manifest (.json): pick it with the .pte and its tokenizer.");
  const named = (name, candidates, what) => {
    const file = files.find((f) => f.name === name) ?? (candidates.length === 1 ? candidates[0] : null);
    if (!file) throw new Error(`The manifest ${manifestFile.name} names ${what} ${name}: pick that file too.`);
    return file;
  };
  if (!manifest.tokenizer?.file) throw new Error(`The manifest ${manifestFile.name} names no tokenizer, which the chat needs.`);
  const pteFile = named(manifest.pte.file, files.filter((f) => f.name.endsWith(".pte")), "its program");
  const tokenizerFile = named(manifest.tokenizer.file, jsons.filter((f) => f !== manifestFile), "its tokenizer");
  if (pteFile.size !== manifest.pte.bytes) {
    throw new Error(
      `${pteFile.name} has ${pteFile.size.toLocaleString("en")} bytes, and its manifest says ${manifest.pte.bytes.toLocaleString("en")}: it is not the file ${manifestFile.name} describes.`,
    );
  }
  return choice({ source: "local", manifest, manifestFile, pteFile, tokenizerFile }, limits);
}

// The picker's panel: `onLoad(choice)` loads the model chosen; a choice that cannot be
// made (no such manifest, files missing) says why in the panel. Returns its controls.
export function initPicker({ limits, onLoad }) {
  const $ = (id) => document.getElementById(id);
  const ui = {
    panel: $("picker"),
    toggle: $("picker-toggle"),
    bundled: $("model-bundled"),
    urlForm: $("model-url-form"),
    url: $("model-url"),
    files: $("model-files"),
    drop: $("model-drop"),
    choice: $("model-choice"),
    choiceName: $("model-choice-name"),
    choiceSize: $("model-choice-size"),
    choiceLimits: $("model-choice-limits"),
    choiceProblem: $("model-choice-problem"),
    load: $("model-load"),
    error: $("picker-error"),
    cached: $("cached-models"),
    cachedEmpty: $("cached-empty"),
  };
  let shown = null;

  const setOpen = (open) => {
    ui.panel.hidden = !open;
    ui.toggle.setAttribute("aria-expanded", String(open));
  };

  function showError(message) {
    shown = null;
    ui.choice.hidden = true;
    ui.error.textContent = message;
    ui.error.hidden = false;
  }

  function show(picked) {
    shown = picked;
    ui.error.hidden = true;
    ui.choice.hidden = false;
    ui.choiceName.textContent = `${picked.name} (${picked.source === "local" ? `your files: ${picked.pteFile.name}` : picked.manifestUrl})`;
    const bytes = picked.manifest.pte.bytes;
    ui.choiceSize.textContent = `${formatBytes(bytes)} (${bytes.toLocaleString("en")} bytes)${picked.source === "local" ? ", read from this device" : " to download"}`;
    ui.choiceSize.dataset.bytes = bytes;
    ui.choiceLimits.textContent =
      `${limits.description}: buffers up to ${formatBytes(limits.maxBufferSize)} (maxBufferSize), ` +
      `storage bindings up to ${formatBytes(limits.maxStorageBufferBindingSize)} (maxStorageBufferBindingSize)`;
    Object.assign(ui.choiceLimits.dataset, { maxBufferSize: limits.maxBufferSize, maxStorageBufferBindingSize: limits.maxStorageBufferBindingSize });
    ui.choiceProblem.textContent = picked.problem ?? "";
    ui.choiceProblem.hidden = !picked.problem;
    ui.load.disabled = Boolean(picked.problem);
  }

  const open = (promise) => promise.then(show, (error) => showError(error.message));

  async function refreshCached() {
    let models;
    try {
      models = await listCachedModels();
    } catch (error) {
      ui.cached.replaceChildren();
      ui.cachedEmpty.textContent = `This browser keeps no models for this page (${error.name}: ${error.message}).`;
      ui.cachedEmpty.hidden = false;
      return;
    }
    ui.cachedEmpty.hidden = models.length > 0;
    ui.cached.replaceChildren(
      ...models.map((model) => {
        const item = document.createElement("li");
        item.dataset.key = model.key;
        item.dataset.bytes = model.bytes;
        const name = document.createElement("span");
        name.className = "name";
        name.textContent = model.name;
        const size = document.createElement("span");
        size.className = "size";
        size.textContent = formatBytes(model.bytes);
        item.append(name, size);
        if (model.manifestUrl) {
          const openButton = document.createElement("button");
          openButton.type = "button";
          openButton.className = "ghost open";
          openButton.textContent = "Open";
          openButton.addEventListener("click", () => open(choiceFromUrl(model.manifestUrl, limits)));
          item.append(openButton);
        }
        const remove = document.createElement("button");
        remove.type = "button";
        remove.className = "ghost delete";
        remove.textContent = "Delete";
        remove.addEventListener("click", async () => {
          await deleteCachedModel(model.key);
          await refreshCached();
        });
        item.append(remove);
        return item;
      }),
    );
  }

  ui.toggle.addEventListener("click", () => {
    setOpen(ui.panel.hidden);
    if (!ui.panel.hidden) refreshCached();
  });
  ui.bundled.addEventListener("click", () => open(choiceFromUrl(BUNDLED_MANIFEST, limits)));
  ui.urlForm.addEventListener("submit", (event) => {
    event.preventDefault();
    if (ui.url.value.trim()) open(choiceFromUrl(ui.url.value.trim(), limits));
  });
  ui.files.addEventListener("change", () => ui.files.files.length && open(choiceFromFiles(ui.files.files, limits)));
  ui.drop.addEventListener("dragover", (event) => {
    event.preventDefault();
    ui.drop.dataset.over = "1";
  });
  ui.drop.addEventListener("dragleave", () => delete ui.drop.dataset.over);
  ui.drop.addEventListener("drop", (event) => {
    event.preventDefault();
    delete ui.drop.dataset.over;
    open(choiceFromFiles(event.dataTransfer.files, limits));
  });
  ui.load.addEventListener("click", () => {
    if (!shown || shown.problem) return;
    setOpen(false);
    onLoad(shown);
  });
  return { refreshCached, open: () => setOpen(true) };
}
