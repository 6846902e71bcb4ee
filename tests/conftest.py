import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

# Mesa's lavapipe complains on stderr without it; harmless, but noisy.
os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
