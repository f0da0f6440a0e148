"""One process, a one-rank NCCL group: the hang watchdog's report carries NCCL's flight recorder.

Run by tests/diagnostics/test_cuda_watchdog.py with TORCH_FR_BUFFER_SIZE set (the recorder is sized when
the process first uses it). Prints one JSON line with what it found; argv[1] is the report folder.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from accelerate.diagnostics.watchdog import SLOT, Watchdog, flight_recorder_lines
from accelerate.launch.hang_report import NCCL_DUMP_PREFIX, read_nccl_dumps, read_reports


def main(folder: str) -> None:
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
    tensor = torch.ones(4, device="cuda")
    for _ in range(3):
        dist.all_reduce(tensor)
    torch.cuda.synchronize()
    time.sleep(0.5)  # NCCL's watchdog thread marks the entries completed
    exits: list[int] = []
    watchdog = Watchdog(rank=0, world_size=1, timeout=timedelta(seconds=2), report_dir=folder, poll_s=0.1,
                        exit=exits.append)  # fmt: skip
    watchdog.start()
    with SLOT.enter("all_reduce", tensor):  # a collective that never returns, as the watchdog sees it
        deadline = time.monotonic() + 20
        while not exits and time.monotonic() < deadline:
            time.sleep(0.1)
    watchdog.stop()
    c10d = torch._C._distributed_c10d
    raw = getattr(c10d, "_dump_nccl_trace", None)
    dump = raw() if raw is not None else c10d._dump_nccl_trace_json(True, False)
    with open(f"{folder}/{NCCL_DUMP_PREFIX}0", "wb") as file:
        file.write(dump if isinstance(dump, bytes) else str(dump).encode())
    report = read_reports(folder).get(0, {})
    result = {
        "exits": exits,
        "in_process": flight_recorder_lines(),
        "report_operation": report.get("operation"),
        "report_recorder": report.get("flight_recorder", []),
        "dump": read_nccl_dumps(folder).get(0, []),
    }
    dist.destroy_process_group()
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])
