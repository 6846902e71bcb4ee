"""The one answer to "is this a JS ArrayBuffer or typed array?" (browser only)."""

import array
import sys

# Python's own byte containers, ruled out first: isinstance against JsProxy runs Python
# code in Pyodide (its metaclass's __instancecheck__), and small writes ask it often.
_PYTHON_BYTES = (bytes, bytearray, memoryview, array.array)

if sys.platform == "emscripten":
    from pyodide.ffi import JsProxy

    def is_js_buffer(data) -> bool:
        """Whether `data` is a JS object (an ArrayBuffer or typed array), not Python bytes."""
        return not isinstance(data, _PYTHON_BYTES) and isinstance(data, JsProxy)

else:

    def is_js_buffer(data) -> bool:
        """Whether `data` is a JS object (an ArrayBuffer or typed array): never, natively."""
        return False
