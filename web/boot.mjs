// Boots Python (Pyodide) with pywebgpu installed, entirely from the local server.
// Works on the main thread and inside a module Web Worker.
//
// The wheels go in with Pyodide's own loadPackage, not micropip: both are named in the
// bundle's wheels.json (flatbuffers is pywebgpu's one requirement), so nothing needs
// resolving, and micropip's import and installs took 0.45-0.48 s of each boot against
// 0.11-0.13 on a 2-core machine (BENCHMARKS.md). micropip installs the same wheels too
// (web/pyscript.html).
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
