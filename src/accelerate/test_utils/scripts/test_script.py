"""The self-check ``accelerate test`` runs (see :mod:`accelerate.test_utils.self_check`).

Run it with ``accelerate launch path/to/test_script.py``; the exit code is 0 only when every check
passed on every process.
"""

from __future__ import annotations

from accelerate.test_utils.self_check import main

__all__ = ["main"]

if __name__ == "__main__":
    raise SystemExit(main())
