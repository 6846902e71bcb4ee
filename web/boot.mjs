// Boots Python (Pyodide) with pywebgpu installed, entirely from the local server.
// Works on the main thread and inside a module Web Worker.

export async function bootPython({ onStatus = () => {} } = {}) {
  const vendor = new URL("vendor/", import.meta.url).href;
  onStatus("Starting Python…");
  const { loadPyodide } = await import(vendor + "pyodide/pyodide.mjs");
  const pyodide = await loadPyodide({ indexURL: vendor + "pyodide/" });
  const response = await fetch(vendor + "wheels/wheels.json");
  if (!response.ok) throw new Error(`wheels.json: HTTP ${response.status} (build the web bundle first)`);
  const wheels = await response.json();
  onStatus("Installing pywebgpu…");
  await pyodide.loadPackage(vendor + "wheels/" + wheels.micropip);
  pyodide.globals.set("_wheel_urls", [wheels.flatbuffers, wheels.pywebgpu].map((w) => vendor + "wheels/" + w));
  // One at a time, dependency first: micropip then finds pywebgpu's requirement satisfied
  // and never consults an index.
  await pyodide.runPythonAsync(`
import micropip
for _url in _wheel_urls:
    await micropip.install(_url)
del _wheel_urls, _url
`);
  return pyodide;
}
