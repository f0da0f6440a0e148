"""Two ranks gather tensors of different sizes without ``--debug`` (tests/launch/test_worker_stderr.py).

gloo aborts the rank that receives more bytes than it expects (SIGABRT, no Python traceback); the
reason is only the line C++ prints on that rank's stderr.
"""

from __future__ import annotations

import torch

from accelerate import Accelerator


def main() -> None:
    accelerator = Accelerator()
    accelerator.gather(torch.ones(2))  # everyone meets once
    accelerator.gather(torch.zeros(4 + accelerator.process_index, 3))
    accelerator.wait_for_everyone()
    print("unreachable: gloo accepted the mismatched gather", flush=True)


if __name__ == "__main__":
    main()
