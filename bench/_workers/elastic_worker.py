"""Bench worker: small DDP steps, each logged with its time and world size, for the re-formation bench.

    elastic_worker.py OUT_DIR MODE      (MODE: elastic | restart)

- elastic: the process on node b (ELASTIC_NODE=b) writes OUT_DIR/blocked at step DIE_AT and waits
  to be killed with its node; a group of 1 formed before that waits for node b (the agent re-forms).
- restart: rank 1 of the first attempt writes OUT_DIR/died (with the time) and exits at step DIE_AT.

Every process writes OUT_DIR/proc-PID.txt once it is ready to train, "started imported ready world
attempt": when its script started (before ``import torch``), when torch and accelerate were
imported, when the process group was formed and the model prepared (all ``time.time()``, the clock
of the step lines and of the death), its world size and the launch's restart count
(``TORCHELASTIC_RESTART_COUNT``). It appends "time world attempt" per step to OUT_DIR/steps-PID.txt.
The bench counts a step only from a process that started after the death it times: a process of
the old group can still log a step just after its peer died.
"""

from __future__ import annotations

import time

STARTED = time.time()  # before the imports: starting a new process is part of what the bench times

import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

from accelerate import Accelerator  # noqa: E402

IMPORTED = time.time()
DIE_AT = 10
STEPS = 30


def main() -> None:
    out, mode = Path(sys.argv[1]), sys.argv[2]
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(32, 32)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model, optimizer = accelerator.prepare(model, optimizer)
    world = accelerator.num_processes
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    (out / f"proc-{os.getpid()}.txt").write_text(f"{STARTED} {IMPORTED} {time.time()} {world} {attempt}\n")
    if mode == "elastic" and world == 1 and not (out / "blocked").exists():
        time.sleep(120)  # the first group formed before node b arrived: the agent re-forms it
    with open(out / f"steps-{os.getpid()}.txt", "a") as log:
        for step in range(STEPS):
            loss = model(torch.randn(8, 32)).pow(2).mean()
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            log.write(f"{time.time()} {world} {attempt}\n")
            log.flush()
            if step == DIE_AT and mode == "elastic" and os.environ.get("ELASTIC_NODE") == "b":
                (out / "blocked").write_text(str(time.time()))
                time.sleep(120)
            if step == DIE_AT and mode == "restart" and attempt == 0 and accelerator.process_index == 1:
                (out / "died").write_text(str(time.time()))
                os._exit(13)
            time.sleep(0.01)  # a step of real work: the survivor is mid-step when its peer dies
    accelerator.end_training()


if __name__ == "__main__":
    main()
