"""A job whose ranks stop meeting in collectives (launched by tests/launch/test_hang_diagnosis.py).

Usage: hang.py MODE TIMEOUT_S. One gather that everyone makes, then:
- ``missing``: rank 0 gathers again while rank 1 sits in ``stuck_here()``;
- ``different``: rank 0 gathers while rank 1 reduces;
- ``finished``: rank 0's script ends (it waits at the launcher's final barrier), rank 1 is stuck.
"""

from __future__ import annotations

import sys
import time
from datetime import timedelta

import torch

from accelerate import Accelerator
from accelerate.utils import InitProcessGroupKwargs


def stuck_here() -> None:
    while True:
        time.sleep(0.2)


def main() -> None:
    mode, timeout = sys.argv[1], float(sys.argv[2])
    accelerator = Accelerator(kwargs_handlers=[InitProcessGroupKwargs(timeout=timedelta(seconds=timeout))])
    accelerator.gather(torch.ones(2))  # everyone meets once
    if accelerator.process_index == 0:
        if mode == "finished":
            return
        accelerator.gather(torch.zeros(4, 3))
    elif mode in ("missing", "finished"):
        stuck_here()
    else:
        accelerator.reduce(torch.ones(5))
    print("unreachable: the collectives did not hang", flush=True)


if __name__ == "__main__":
    main()
