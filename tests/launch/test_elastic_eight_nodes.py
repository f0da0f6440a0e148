"""Eight real "nodes" on loopback lose three and gain one; every sample of the epoch is trained once.

Eight ``accelerate launch --nnodes 5:8 --num_processes 8`` launchers (one process per node, each
launcher in its own session: its own process tree) train one epoch of elastic_train.py with a
checkpoint every 2 steps. After step 5 nodes b, c and d stop (the others block in step 6's
all-reduce) and the test SIGKILLs their sessions; the five survivors re-form at world size 5 and
resume from step 4's checkpoint (step 5 is replayed). After step 8's checkpoint they wait, a ninth
launcher joins, the group re-forms at 6 and finishes the epoch. Counting each step's last attempt,
every sample is trained exactly once, and no process of any node outlives the run.

Everything is timed by files the script writes, not by sleeps. The first group may form before all
eight launchers reach the rendezvous (a short last call on a busy machine): the script then waits
for the others to arrive (``--start_world 8``), so training always starts at 8.
tests/launch/test_elastic_scale.py runs the same membership changes through the loader in one
process, in a second.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.commands.helpers import reserved_port
from tests.launch import loopback_nodes as loopback

# 4 steps at 8 nodes + 4 at 5 + 4 at 6, 2 samples per process and step: the 6-node group ends the
# epoch on a full step, so no sample is padded in and "exactly once" is exact.
LENGTH = 4 * 8 * 2 + 4 * 5 * 2 + 4 * 6 * 2
TIMEOUT = 240
# A 1 s last call: a group completes 1 s after its fifth node arrives (torch: 30 s). The nodes start
# together and all eight joined the first round within 0.34 s; in a re-formation the survivors (and
# the joining node) arrived within 0.95 s of each other, the sixth 0.05 s after the fifth (load 4,
# torch's rendezvous log). A node that still misses a last call only costs a re-formation more: the
# script waits for it (``--start_world``, ``--wait_at``). A dead node is dropped from the rendezvous
# after 8 missed 1 s heartbeats (torch: 3 x 5 s): a live agent's heartbeats came at most 2.04 s apart
# in that run, and eight launchers and their processes share 2 cores, so the margin stays about 4x.
RDZV_CONF = "last_call_timeout=1,join_timeout=120,keep_alive_interval=1,keep_alive_max_attempt=8"
VICTIMS = ("b", "c", "d")
SURVIVORS = ("a", "e", "f", "g", "h")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_eight_nodes_lose_three_then_gain_one_and_every_sample_is_trained_exactly_once(
    tmp_path: Path,
) -> None:
    ids = tmp_path / "ids"
    ids.mkdir()
    args = [str(tmp_path / "project"), str(ids), str(tmp_path / "final.pt"), "--length", str(LENGTH),
            "--start_world", "8", "--block_at", "5", "--victims", ",".join(VICTIMS),
            "--wait_at", "8", "--wait_world", "5"]  # fmt: skip
    token = uuid.uuid4().hex
    nodes: dict[str, loopback.Node] = {}

    def start(name: str, port: int) -> None:
        nodes[name] = loopback.start_node(
            name, port, tmp_path, args, nnodes="5:8", num_processes=8, rdzv_conf=RDZV_CONF, token=token
        )

    with reserved_port() as port:
        try:
            for name in "abcdefgh":  # b-h retry their store connection until a listens
                start(name, port)
            blocked = [ids / f"blocked-{name}" for name in VICTIMS]
            loopback.wait_for(blocked, list(nodes.values()), "nodes b, c, d reaching step 5", TIMEOUT)
            for name in VICTIMS:
                loopback.kill_node(nodes[name])
            survivors = [nodes[name] for name in SURVIVORS]
            # Every survivor past step 8's checkpoint: a join during the save would lose it (step 6's remains).
            waiting = [ids / f"waiting-{name}" for name in SURVIVORS]
            loopback.wait_for(waiting, survivors, "the 5 survivors reaching step 8", TIMEOUT)
            start("i", port)
            codes = {name: nodes[name].finish(TIMEOUT) for name in (*SURVIVORS, "i")}
        finally:
            loopback.kill_running(list(nodes.values()))
    loopback.wait_no_leftovers(token, 15)
    consoles = {name: node.output() for name, node in nodes.items()}
    assert set(codes.values()) == {0}, (codes, consoles["a"], consoles["i"])
    steps = loopback.check_epoch(ids, LENGTH)
    sizes = {step: len(samples) // 2 for step, samples in steps.items()}
    assert sizes == {s: 8 if s <= 4 else 5 if s <= 8 else 6 for s in range(1, 13)}, sizes
    pids = {name: node.proc.pid for name, node in nodes.items()}
    _check_membership_log(consoles["a"], "".join(consoles.values()), pids)


def _check_membership_log(survivor: str, everyone: str, pids: dict[str, int]) -> None:
    """The survivor's log names the three deaths and the join by launcher pid, with the world sizes."""
    events = [
        line for line in survivor.splitlines() if line.startswith("accelerate launch: membership: node")
    ]

    def pid(line: str) -> int:  # accelerate launch: membership: node HOST:PID left; world size 8 -> 5
        return int(line.split()[4].rsplit(":", 1)[1])

    # Groups formed before all eight arrived, or a survivor too slow for the join's last call (the
    # group then re-forms once more at 6), add events; these are in every run.
    deaths = [pid(line) for line in events if line.endswith("left; world size 8 -> 5")]
    assert sorted(deaths) == sorted(pids[name] for name in VICTIMS), events
    assert any(pid(line) == pids["i"] and " joined; " in line for line in events), events
    assert events[-1].endswith("-> 6"), events
    assert (
        "(saved by 8 processes at optimizer step 4) on 5 processes; 1 optimizer step(s) replayed" in everyone
    )
    assert (
        "(saved by 5 processes at optimizer step 8) on 6 processes; 0 optimizer step(s) replayed" in everyone
    )
