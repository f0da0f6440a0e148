"""Launched by tests/state/test_exit.py: the script returns normally, then one rank aborts at exit.

``python abort_at_exit.py RANK``: both ranks run a collective and return; rank RANK then ends the
way issue 19's runs did, in C++'s ``std::terminate`` ("terminate called without an active
exception", SIGABRT) from an exit handler, after its script had succeeded.
"""

from __future__ import annotations

import atexit
import ctypes
import ctypes.util
import os
import sys

import torch

from accelerate import Accelerator


def _terminate() -> None:
    library = ctypes.util.find_library("stdc++")
    if library is not None:
        ctypes.CDLL(library)._ZSt9terminatev()  # std::terminate(): prints the message, aborts
    os.abort()  # no libstdc++ to be found: the same signal without the message


def main(rank_to_abort: int) -> None:
    accelerator = Accelerator(cpu=True)
    total = accelerator.reduce(torch.ones(1), "sum")
    if accelerator.process_index == rank_to_abort:
        atexit.register(_terminate)
    print(f"rank {accelerator.process_index}: script returned, sum {total.item():.0f}", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]))
