"""Where the shared public traces live: ../shared/data next to the checkout, or
$GPU_AUTOSCALER_DATA. Tests that need them skip when they are absent (never copied here)."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("GPU_AUTOSCALER_DATA", REPO.parent / "shared" / "data"))
