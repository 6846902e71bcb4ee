// The model's files on the page: the manifest, then the .pte, downloaded with progress (or
// read from a file the reader picked), kept in the Cache API and checked against the
// manifest's sha256s before every use (as it streams in, chunk by chunk, where the
// manifest has chunk sha256s).

import { readModelBody } from "./vendor/checked-read.mjs";

export const CACHE_NAME = "pywebgpu-models";
// What a cached entry says of itself: the model's name and its manifest's URL.
const NAME_HEADER = "X-Model-Name";
const MANIFEST_HEADER = "X-Model-Manifest";
// Where the chat worker serves a local model's manifest and tokenizer from (a scheme no
// server has: chat-worker.mjs answers its fetches from the reader's Files).
export const LOCAL_FILES = "local-files:/";

// A file that is not what its manifest says (truncated, too long, wrong sha256).
export class DamagedModelError extends Error {
  constructor(detail, advice = "Reload the page to download it again.") {
    super(`The model file is damaged (${detail}). ${advice}`);
    this.detail = detail;
    this.name = "DamagedModelError";
  }
}

// The network or the server failed; the message says which file and how.
export class DownloadError extends Error {
  constructor(message) {
    super(message);
    this.name = "DownloadError";
  }
}

// A manifest that is not one, or lacks what the page reads; the message names the field.
export class ManifestError extends Error {
  constructor(manifestUrl, detail) {
    super(`The model's manifest at ${manifestUrl} cannot be used: ${detail}.`);
    this.name = "ManifestError";
  }
}

const MANIFEST_FORMAT = "pywebgpu.llama-export";
const MANIFEST_VERSION = 1;

const isPositiveInteger = (v) => Number.isInteger(v) && v > 0;
// The fields the page reads, and the chat template without which the worker's
// LanguageModel.load (which checks every field it reads) refuses the model after its download.
const MANIFEST_FIELDS = [
  ["pte.file", (v) => typeof v === "string" && v !== "", "a file name"],
  ["pte.bytes", isPositiveInteger, "a positive integer"],
  ["pte.sha256", (v) => typeof v === "string" && /^[0-9a-f]{64}$/.test(v), "64 lowercase hex digits"],
  ["model.vocab_size", isPositiveInteger, "a positive integer"],
  ["model.dim", isPositiveInteger, "a positive integer"],
  ["chat_template", (v) => typeof v === "string" && v !== "", "the model's chat template (a Jinja template string)"],
];

function checkManifest(manifest, manifestUrl) {
  const fail = (detail) => { throw new ManifestError(manifestUrl, detail); };
  if (manifest?.format !== MANIFEST_FORMAT) {
    fail(`it is not a model manifest of pywebgpu's export tools (its "format" is ${JSON.stringify(manifest?.format ?? null)}, not "${MANIFEST_FORMAT}")`);
  }
  const version = manifest.format_version;
  if (!isPositiveInteger(version)) fail(`"format_version" must be a positive integer, not ${JSON.stringify(version ?? null)}`);
  if (version > MANIFEST_VERSION) fail(`it is format version ${version}, and this page reads version ${MANIFEST_VERSION}`);
  for (const [path, valid, mustBe] of MANIFEST_FIELDS) {
    let value = manifest;
    for (const key of path.split(".")) {
      if (value === null || typeof value !== "object" || !(key in value)) fail(`it has no "${path}"`);
      value = value[key];
    }
    if (!valid(value)) fail(`"${path}" must be ${mustBe}, not ${JSON.stringify(value)}`);
  }
  return manifest;
}

export async function fetchManifest(manifestUrl) {
  let response;
  try {
    response = await fetch(manifestUrl);
  } catch (error) {
    throw new DownloadError(`Could not download the model's manifest (${error.message}). Check your connection and reload.`);
  }
  if (!response.ok) {
    throw new DownloadError(`Could not download the model's manifest: the server answered HTTP ${response.status} for ${manifestUrl}.`);
  }
  return parseManifest(await response.text(), manifestUrl);
}

// The manifest from its JSON text; `where` names it in errors (its URL or file name).
export function parseManifest(text, where) {
  let manifest;
  try {
    manifest = JSON.parse(text);
  } catch {
    throw new ManifestError(where, "it is not valid JSON");
  }
  return checkManifest(manifest, where);
}

// The cache key names the expected sha256, so a re-exported model never matches an old entry.
function cacheKey(pteUrl, sha256) {
  const key = new URL(pteUrl);
  key.searchParams.set("sha256", sha256);
  return key.href;
}

async function sha256Hex(buffer) {
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", buffer));
  return Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("");
}

const bytes = (n) => n.toLocaleString("en");

function damagedChunk(expected, index) {
  const first = index * expected.chunk_bytes;
  const last = Math.min(first + expected.chunk_bytes, expected.bytes) - 1;
  return new DamagedModelError(`its sha256 of bytes ${bytes(first)}-${bytes(last)} does not match the manifest`);
}

// Streams `response` (the network's or the cache's) into one ArrayBuffer of the manifest's
// size, reporting progress, and checks it: chunk by chunk as it comes where the manifest
// has chunk sha256s (the wheel's checked_read.mjs and chunk_hasher.js, which
// LanguageModel.load's own download runs too, copied to vendor/ by devtools/bundle.py),
// else its sha256 after. A stream that fails is rethrown as it is, unless `resume` (see
// readModelBody) gives the response to go on with.
async function readChecked(response, expected, onProgress, resume = null) {
  onProgress(0, expected.bytes);
  const read = await readModelBody(response, expected.bytes, {
    onProgress,
    progressStep: 0, // every piece: a download that breaks off says how far it came
    chunkBytes: expected.chunk_bytes,
    chunkSha256: expected.chunk_sha256 ?? null,
    hasherUrl: new URL("./vendor/chunk-hasher.js", import.meta.url),
    resume,
  });
  if (read.tooLarge) throw new DamagedModelError(`larger than the ${bytes(expected.bytes)} bytes its manifest says`);
  if (read.damagedChunk >= 0) throw damagedChunk(expected, read.damagedChunk);
  if (read.data.byteLength < expected.bytes) {
    throw new DamagedModelError(`truncated: ${bytes(read.data.byteLength)} bytes instead of ${bytes(expected.bytes)}`);
  }
  if (!read.verified && (await sha256Hex(read.data)) !== expected.sha256) {
    throw new DamagedModelError("its sha256 does not match the manifest");
  }
  return read.data;
}

// A .pte the reader picked on this device (a File), read and checked as a download is.
export async function readLocalModelFile(file, manifest, { onProgress = () => {} } = {}) {
  try {
    return await readChecked(new Response(file), manifest.pte, onProgress);
  } catch (error) {
    if (error instanceof DamagedModelError) throw new DamagedModelError(error.detail, `${file.name} is not the file its manifest describes.`);
    throw new DownloadError(`The model file ${file.name} could not be read (${error.message}).`);
  }
}

// A download that breaks off is taken up again this many times in a row without a new
// byte coming, waiting a second longer before each.
const RETRIES = 3;
const RETRY_WAIT_MS = 1000;

// GET `url` (from byte `from` on, where the server can); a DownloadError names an HTTP
// error, a network failure is thrown as it is.
async function fetchFrom(url, from, signal) {
  const response = await fetch(url, { cache: "no-store", signal, headers: from > 0 ? { Range: `bytes=${from}-` } : {} });
  if (response.status === 206 && !response.headers.get("Content-Range")?.startsWith(`bytes ${from}-`)) {
    throw new DownloadError(`The model download failed: the server answered a request for the bytes from ${bytes(from)} of ${url} with others (Content-Range: ${response.headers.get("Content-Range")}).`);
  }
  if (!response.ok) throw new DownloadError(`The model download failed: the server answered HTTP ${response.status} for ${url}.`);
  return response;
}

// Downloads and checks the .pte. A download that breaks off goes on from the bytes it has
// (an HTTP Range request; a server that ignores it sends the whole file, which starts
// the read over), saying so in `onStatus`.
async function download(url, expected, onProgress, onStatus, signal) {
  let response;
  try {
    response = await fetchFrom(url, 0, signal);
  } catch (error) {
    if (error instanceof DownloadError) throw error;
    throw new DownloadError(`The model download failed (${error.message}). Check your connection and reload.`);
  }
  let failures = 0, lastBreak = -1;
  const resume = async (received, error) => {
    failures = received > lastBreak ? 1 : failures + 1;
    lastBreak = received;
    for (;;) {
      if (signal?.aborted || failures > RETRIES) throw error;
      onStatus(`The download broke off after ${bytes(received)} of ${bytes(expected.bytes)} bytes (${error.message}); trying again…`);
      await new Promise((done) => setTimeout(done, RETRY_WAIT_MS * failures));
      try {
        const next = await fetchFrom(url, received, signal);
        onStatus(next.status === 206 ? `Downloading the model from byte ${bytes(received)} on…` : "Downloading the model again from its start (the server cannot send the rest alone)…");
        return next;
      } catch (failure) {
        if (failure instanceof DownloadError || signal?.aborted) throw failure;
        error = failure;
        failures += 1;
      }
    }
  };
  try {
    return await readChecked(response, expected, onProgress, resume);
  } catch (error) {
    if (error instanceof DamagedModelError || error instanceof DownloadError) throw error;
    throw new DownloadError(
      `The model download broke off after ${bytes(Math.max(lastBreak, 0))} of ${bytes(expected.bytes)} bytes and could not be taken up again (${error.message}). Check your connection and reload to try again.`,
    );
  }
}

// What the reader should know when the verified file could not be kept (the Cache API
// refused it, or the browser gives this page none): the bytes it needs and, where the
// browser says, the room this site has.
async function notKeptMessage(error, size) {
  if (error.name !== "QuotaExceededError") {
    return `This browser does not let the page keep the model (${error.name}: ${error.message}): it runs from this download of ${bytes(size)} bytes, and the next visit downloads it again.`;
  }
  let room = "";
  try {
    const { quota, usage } = await navigator.storage.estimate();
    if (quota > 0) room = ` This site may keep ${bytes(Math.max(quota - usage, 0))} more bytes.`;
  } catch {
    // No estimate: the message goes without it.
  }
  return `This browser's storage has no room for it: the model needs ${bytes(size)} bytes.${room} It runs from this download, and the next visit downloads it again; deleting models kept in the Model panel, or freeing disk space, makes room.`;
}

// The .pte as a verified ArrayBuffer: from the cache when it holds a good copy, else
// downloaded (and cached once verified, in place of any copy of another version of the
// file: the cache key names the sha256, so such a copy is never read). A damaged cached
// copy is deleted, so a reload downloads it again. Returns {buffer, fromCache, notKept}:
// notKept is null, or the message saying why the download could not be cached.
// `name` is the model's, kept with the cached copy for listCachedModels; `signal` aborts
// the download.
export async function loadModelFile(manifestUrl, manifest, { name = "", signal, onProgress = () => {}, onStatus = () => {} } = {}) {
  const expected = manifest.pte;
  const pteUrl = new URL(expected.file, new URL(manifestUrl, location.href)).href;
  const key = cacheKey(pteUrl, expected.sha256);
  let cache = null, noCache = null;
  try {
    cache = await caches.open(CACHE_NAME);
  } catch (error) {
    noCache = error; // storage blocked in the browser's settings: the download still serves
  }

  const cached = await cache?.match(key);
  if (cached) {
    onStatus("Checking the cached model file…");
    try {
      return { buffer: await readChecked(cached, expected, () => {}), fromCache: true, notKept: null };
    } catch (error) {
      await cache.delete(key);
      if (error instanceof DamagedModelError) throw error;
      throw new DamagedModelError(`the cached copy could not be read: ${error.message}`);
    }
  }

  onStatus("Downloading the model…");
  const buffer = await download(pteUrl, expected, (done, total) => {
    onProgress(done, total);
    if (done === total) onStatus("Checking the downloaded model file…");
  }, onStatus, signal);
  if (!cache) return { buffer, fromCache: false, notKept: await notKeptMessage(noCache, expected.bytes) };
  // Older versions of the same file are dead weight once a new one is verified.
  for (const request of await cache.keys()) {
    const url = new URL(request.url);
    url.searchParams.delete("sha256");
    if (url.href === pteUrl && request.url !== key) await cache.delete(request);
  }
  // Response copies the bytes, so the buffer can still be transferred to the worker.
  try {
    const headers = { "Content-Type": "application/octet-stream", "Content-Length": String(buffer.byteLength) };
    await cache.put(key, new Response(buffer, { headers: { ...headers, [NAME_HEADER]: encodeURIComponent(name), [MANIFEST_HEADER]: manifestUrl } }));
  } catch (error) {
    return { buffer, fromCache: false, notKept: await notKeptMessage(error, expected.bytes) };
  }
  return { buffer, fromCache: false, notKept: null };
}

// The cached model files: [{key, name, manifestUrl, bytes}], by name; throws where the
// browser gives this page no Cache API.
export async function listCachedModels() {
  const cache = await caches.open(CACHE_NAME);
  const models = [];
  for (const request of await cache.keys()) {
    const response = await cache.match(request);
    if (!response) continue; // deleted meanwhile
    const length = Number(response.headers.get("Content-Length"));
    const fileName = new URL(request.url).pathname.split("/").pop();
    models.push({
      key: request.url,
      name: decodeURIComponent(response.headers.get(NAME_HEADER) ?? "") || fileName,
      manifestUrl: response.headers.get(MANIFEST_HEADER),
      bytes: length > 0 ? length : (await response.blob()).size,
    });
  }
  return models.sort((a, b) => a.name.localeCompare(b.name));
}

export async function deleteCachedModel(key) {
  return (await caches.open(CACHE_NAME)).delete(key);
}
