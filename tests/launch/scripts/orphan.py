"""Writes this rank's pid, then trains on forever: rank 0 in Python, rank 1 blocked in a collective."""

import os
import sys
import time

import torch
import torch.distributed as dist

from accelerate import Accelerator

accelerator = Accelerator(cpu=True)
folder = sys.argv[1]
with open(os.path.join(folder, f"pid_{accelerator.process_index}"), "w") as file:
    file.write(str(os.getpid()))
accelerator.wait_for_everyone()
if accelerator.process_index == 1:
    dist.all_reduce(torch.ones(1))  # rank 0 never joins: blocked in gloo's wait
while True:
    time.sleep(0.05)
