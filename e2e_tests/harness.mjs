// Boots Pyodide + pywebgpu on the main thread; tests run Python through window.pyodideReady.
import { bootPython } from "/boot.mjs";
window.pyodideReady = bootPython();
