"""Launched by tests: rank 0 fails on the first attempt only, so a run with --max_restarts 1 succeeds.

Each process prints its rank, its torchrun role (ROLE_NAME) and which attempt it is.
"""

import os
import sys

from accelerate import PartialState

attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
state = PartialState()
role, restarts = os.environ.get("ROLE_NAME"), os.environ.get("TORCHELASTIC_MAX_RESTARTS")
print(f"rank={state.process_index} role={role} attempt={attempt} max_restarts={restarts}", flush=True)
if attempt == 0 and state.process_index == 0:
    sys.exit(3)
state.wait_for_everyone()
print(f"rank={state.process_index} done", flush=True)
