// Boots Python (Pyodide) with pywebgpu installed, entirely from the local server.
// Works on the main thread and inside a module Web Worker.
//
// The wheels go in with Pyodide's own loadPackage, not micropip: the bundle's wheels.json
// names both (flatbuffers is pywebgpu's one requirement), so nothing needs resolving and
// the boot skips micropip's import.
export async function bootPython({ onStatus = () => {} } = {}) {
  const vendor = new URL("vendor/", import.meta.url).href;
  onStatus("Starting Python…");
  const response = await fetch(vendor + "wheels/wheels.json");
  if (!response.ok) throw new Error(`wheels.json: HTTP ${response.status} (build the web bundle first)`);
  const wheels = await response.json();
  const { loadPyodide } = await import(vendor + "pyodide/pyodide.mjs");
  const pyodide = await loadPyodide({ indexURL: vendor + "pyodide/" });
  onStatus("Installing pywebgpu…");
  // loadPackage reports a wheel it could not load through errorCallback, not by failing.
  const errors = [];
  await pyodide.loadPackage([wheels.flatbuffers, wheels.pywebgpu].map((w) => vendor + "wheels/" + w), {
    messageCallback: () => {},
    errorCallback: (message) => errors.push(message),
  });
  if (errors.length) throw new Error(`pywebgpu could not be installed: ${errors.join(" ")}`);
  return pyodide;
}
