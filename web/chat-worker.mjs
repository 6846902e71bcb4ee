// The chat demo's module Web Worker: Python (Pyodide + pywebgpu) runs the model here, so
// the page stays responsive while the GPU works.
//
// page → worker: {type: "load", manifestUrl, pte (ArrayBuffer, transferred), systemPrompt}
//                {type: "send", id, text, temperature, maxTokens}
//                {type: "cancel"}            stop the reply being streamed
//                {type: "reset", systemPrompt} a new chat
// worker → page: {type: "status", text}
//                {type: "ready", adapter, loadSeconds}
//                {type: "token", id, text}    one streamed piece of the reply
//                {type: "done", id, stats}    chat.stats of the finished reply
//                {type: "error", id?, kind, message}   kind: boot | model-file | device-lost | gpu | internal
import { bootPython } from "./boot.mjs";

const CHAT_PY = `
import time
import traceback

import js
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


class ChatWorker:
    def __init__(self):
        self.model = None
        self.chat = None

    async def load(self, manifest_url, pte, system_prompt):
        post(type="status", text="Preparing the model on the GPU…")
        started = time.perf_counter()
        try:
            # The page checked the file's sha256 (model-files.mjs) before handing it over.
            self.model = await LanguageModel.load(manifest_url, pte_data=pte, sha256_checked=True)
        except Exception as error:
            post_error(error)
            return
        self.chat = ChatSession(self.model, system_prompt or None)
        # The system turn is prefilled while the reader types: the first question then
        # prefills only itself (send waits for it).
        self.chat.start_prefix()
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
            post_error(error, request_id)
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
      return chat.load(data.manifestUrl, data.pte, data.systemPrompt);
    case "send":
      return chat.send(data.id, data.text, data.temperature, data.maxTokens);
    case "cancel":
      return chat.cancel();
    case "reset":
      return chat.reset(data.systemPrompt);
  }
};
