// The chat demo's module Web Worker: Python (Pyodide + pywebgpu) runs the model here, so
// the page stays responsive while the GPU works.
//
// page → worker: {type: "load", manifestUrl, pte (an ArrayBuffer the page checked, transferred;
//                 or a File, checked here piece by piece: checked false), checked, systemPrompt, localFiles}
//                (a local model: localFiles maps the manifest's and the tokenizer's names
//                to the reader's Files, and manifestUrl is LOCAL_FILES + its name)
//                {type: "send", id, text, temperature, maxTokens}
//                {type: "cancel"}            stop the reply being streamed
//                {type: "reset", systemPrompt} a new chat
// worker → page: {type: "status", text}
//                {type: "stage", name}      the load reached a stage: program | build | warm-up
//                {type: "ready", adapter, loadSeconds}
//                {type: "token", id, text}    one streamed piece of the reply
//                {type: "done", id, stats}    chat.stats of the finished reply
//                {type: "error", id?, kind, message}   kind: boot | model-file | device-lost | gpu | internal
import { bootPython } from "./boot.mjs";
import { LOCAL_FILES } from "./model-files.mjs";

// A local model's files, fetched by Python as a server's are: at LOCAL_FILES, which no
// server has, they are answered from the reader's Files, without a request.
let localFiles = new Map();
const networkFetch = self.fetch.bind(self);
self.fetch = (resource, options) => {
  const url = resource instanceof Request ? resource.url : String(resource);
  if (!url.startsWith(LOCAL_FILES)) return networkFetch(resource, options);
  const file = localFiles.get(decodeURIComponent(url.slice(LOCAL_FILES.length)));
  return Promise.resolve(file ? new Response(file) : new Response(null, { status: 404, statusText: "not among the files picked" }));
};

const CHAT_PY = `
import time
import traceback

import js
from pyodide.code import run_js
from pyodide.ffi import create_proxy, to_js

from pywebgpu.gpu import DeviceLostError, GPUError
from pywebgpu.llm import ChatSession, LanguageModel, ModelFileError, SamplingParams


def post(**message):
    js.postMessage(to_js(message, dict_converter=js.Object.fromEntries))


def post_error(error, request_id=None):
    if isinstance(error, DeviceLostError):
        kind = "device-lost"
    elif isinstance(error, ModelFileError):
        kind = "model-file"
    elif isinstance(error, GPUError):
        kind = "gpu"
    else:
        kind = "internal"
        # Not one of ours: the traceback is what a bug report needs.
        js.console.warn(traceback.format_exc())
    message = str(error) or type(error).__name__
    post(type="error", id=request_id, kind=kind, message=message)


# A read that fails as the device goes can fail before the device's lost promise settles:
# a failed reply waits this long for it, so that its message names the real cause.
LOST_SETTLE_MS = 100
_lost_within = run_js("(device, ms) => Promise.race([device.lost, new Promise((resolve) => setTimeout(() => resolve(null), ms))])")


async def as_lost_device(error, device):
    """\`error\`, or a DeviceLostError where the device was lost as it happened."""
    if isinstance(error, GPUError) and not isinstance(error, DeviceLostError):
        info = await _lost_within(device.raw, LOST_SETTLE_MS)
        if info is not None:
            return DeviceLostError(f"the GPU device was lost: {info.message or info.reason}")
    return error


class ChatWorker:
    def __init__(self):
        self.model = None
        self.chat = None

    async def load(self, manifest_url, pte, checked, system_prompt):
        post(type="status", text="Preparing the model on the GPU…")
        started = time.perf_counter()
        stage = lambda name: post(type="stage", name=name)
        try:
            # An ArrayBuffer the page checked (model-files.mjs), or a File read and checked here piece by piece.
            self.model = await LanguageModel.load(manifest_url, pte_data=pte, sha256_checked=bool(checked), on_stage=stage)
            self.chat = ChatSession(self.model, system_prompt or None)
            # The graph's first run: the system turn, which the first question then need not prefill.
            stage("warm-up")
            await self.chat.start_prefix()
        except Exception as error:
            post_error(error)
            return
        device = self.model.graph.device
        # A device lost while idle must reach the page too, not only the next send().
        self._on_lost = create_proxy(lambda info: post(type="error", kind="device-lost", message=f"the GPU device was lost: {info.message or info.reason}"))
        device.raw.lost.then(self._on_lost)
        post(type="ready", adapter=device.adapter.description, loadSeconds=time.perf_counter() - started)

    async def send(self, request_id, text, temperature, max_tokens):
        sampling = SamplingParams(temperature=float(temperature), top_k=40, top_p=0.95)
        try:
            async for piece in self.chat.send(text, sampling=sampling, max_tokens=int(max_tokens)):
                post(type="token", id=request_id, text=piece)
        except Exception as error:
            post_error(await as_lost_device(error, self.model.graph.device), request_id)
            return
        post(type="done", id=request_id, stats=dict(self.chat.stats))
        # The reply's turn's end and the next user turn's header, while the reader reads.
        self.chat.start_prefix()

    def cancel(self):
        if self.chat:
            self.chat.cancel()

    def reset(self, system_prompt):
        system_prompt = system_prompt or None
        if self.chat.system_prompt == system_prompt:
            self.chat.reset()
        else:
            # A different system prompt changes the conversation from its first token on:
            # a new session; it overwrites the KV cache from position 0.
            self.chat = ChatSession(self.model, system_prompt)
        self.chat.start_prefix()


chat_worker = ChatWorker()
`;

const python = bootPython({ onStatus: (text) => postMessage({ type: "status", text }) }).then(async (pyodide) => {
  await pyodide.runPythonAsync(CHAT_PY);
  return pyodide.globals.get("chat_worker");
});
python.catch((error) => postMessage({ type: "error", kind: "boot", message: `Python failed to start: ${error.message ?? error}` }));

onmessage = async ({ data }) => {
  let chat;
  try {
    chat = await python;
  } catch {
    return; // already reported
  }
  switch (data.type) {
    case "load":
      localFiles = new Map(Object.entries(data.localFiles ?? {}));
      return chat.load(data.manifestUrl, data.pte, data.checked, data.systemPrompt);
    case "send":
      return chat.send(data.id, data.text, data.temperature, data.maxTokens);
    case "cancel":
      return chat.cancel();
    case "reset":
      return chat.reset(data.systemPrompt);
  }
};
