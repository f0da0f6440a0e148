"""Where the tests find upstream's interface list: ``../shared/reference/upstream-api-1.15.md`` beside
the checkout (as in CI), or ``$ACCELERATE_API_REFERENCE``. One definition, so no test looks for it at
a path that only one machine has."""

from __future__ import annotations

import os
from pathlib import Path

_DEFAULT = Path(__file__).resolve().parents[2].parent / "shared" / "reference" / "upstream-api-1.15.md"
REFERENCE = Path(os.environ.get("ACCELERATE_API_REFERENCE", str(_DEFAULT)))
