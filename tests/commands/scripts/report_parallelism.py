"""Launched by tests: reports the ParallelismConfig this process gets from `accelerate launch`.

Usage: report_parallelism.py OUT_DIR -- writes OUT_DIR/rank<RANK>.json with the config the launcher's
variables describe and, where the Accelerator runs that topology, the Accelerator's own view of it.
"""

import json
import os
import sys
from pathlib import Path

from accelerate.config.env import read_launch_env
from accelerate.state.parallelism_env import parallelism_config_from_env
from accelerate.utils.errors import NotAvailableYetError

DIMS = ("dp_replicate", "dp_shard", "cp", "sp", "tp")


def sizes(config: object) -> dict[str, int]:
    return {dim: getattr(config, f"{dim}_size") for dim in DIMS}


report: dict[str, object] = {"rank": int(os.environ["RANK"]), "world": int(os.environ["WORLD_SIZE"])}
from_env = parallelism_config_from_env(read_launch_env())
report["from_env"] = None if from_env is None else sizes(from_env)
try:
    from accelerate import Accelerator

    accelerator = Accelerator()
except NotAvailableYetError as exc:
    # The runtime may not run every topology the launcher can describe (tensor parallelism in some builds).
    report["accelerator"] = f"refused: {exc}"
else:
    report["accelerator"] = sizes(accelerator.parallelism_config)
    report["state_tp_size"] = accelerator.state.parallelism_config.tp_size
    report["sp_backend"] = accelerator.parallelism_config.sp_backend
    accelerator.wait_for_everyone()
Path(sys.argv[1], f"rank{report['rank']}.json").write_text(json.dumps(report))
