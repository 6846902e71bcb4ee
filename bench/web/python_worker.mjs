// pywebgpu's Python in a module Web Worker (/worker.mjs, as the chat demo runs it):
// run(code) runs Python there and resolves to its result; its globals persist between calls.

export function startPythonWorker(log) {
  const worker = new Worker("/worker.mjs", { type: "module" });
  const pending = new Map();
  let nextId = 0;
  let bootError = null;
  worker.onmessage = ({ data }) => {
    if (data.type === "status") return log(data.text);
    if (data.type === "boot-error") {
      bootError = new Error(`Python failed to start: ${data.error}`);
      for (const { reject } of pending.values()) reject(bootError);
      return pending.clear();
    }
    const call = pending.get(data.id);
    pending.delete(data.id);
    if (data.error !== undefined) call.reject(new Error(data.error));
    else call.resolve(data.result);
  };
  const run = (code) =>
    bootError
      ? Promise.reject(bootError)
      : new Promise((resolve, reject) => {
          pending.set(++nextId, { resolve, reject });
          worker.postMessage({ id: nextId, code });
        });
  return { run, terminate: () => worker.terminate() };
}
