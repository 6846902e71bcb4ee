// A module Web Worker running Python: post {id, code}; Python's result (converted to a
// string) or its error comes back as {id, result} / {id, error}. Status lines come as
// {type: "status", text}.
import { bootPython } from "./boot.mjs";

const ready = bootPython({ onStatus: (text) => postMessage({ type: "status", text }) });
ready.catch((error) => postMessage({ type: "boot-error", error: String(error) }));

onmessage = async ({ data: { id, code } }) => {
  try {
    const pyodide = await ready;
    const result = await pyodide.runPythonAsync(code);
    postMessage({ id, result: result === undefined ? null : String(result) });
  } catch (error) {
    postMessage({ id, error: String(error) });
  }
};
