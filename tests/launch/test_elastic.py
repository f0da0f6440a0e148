"""Elastic training on loopback: two launcher processes are two "nodes" (1 process each, ``--nnodes 1:2``).

Node b (not hosting the c10d store) is killed after step 5; node a's agent re-forms the group at
world size 1, the script resumes from the checkpoint of step 4 (one step replayed) and trains on;
after the checkpoint of step 8 a third node joins, the group re-forms at world size 2 and finishes
the epoch. Every sample of the epoch is trained on exactly once (counting each step's last
attempt), and the final parameters equal a reference run that changes the world size at the same
steps by stopping and relaunching (2 processes to step 4, 1 to step 8, 2 to the end).
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch

from accelerate.launch.in_process import debug_launcher
from tests.commands.helpers import reserved_port
from tests.launch import loopback_nodes as loopback

LENGTH = 48
TIMEOUT = 120
# A short last call (torch: 30 s) forms the smaller group soon after the death; a short heartbeat
# (torch: 5 s x 3) drops the dead node from the rendezvous in ~5 s instead of 15, which the new
# round otherwise waits for. Five missed beats, not three: a live agent starved of CPU for a few
# seconds on a busy 2-core machine must not be dropped (an extra re-formation would fail the test).
RDZV_CONF = "last_call_timeout=1,join_timeout=60,keep_alive_interval=1,keep_alive_max_attempt=5"


def _check_epoch(ids_dir: Path) -> dict[int, list[int]]:
    return loopback.check_epoch(ids_dir, LENGTH)


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("elastic_train", loopback.SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Reference:
    """The reference run, going on in a forked process beside the test (see :func:`reference`)."""

    def __init__(self, home: Path) -> None:
        self.home = home
        # Forked, not a thread: debug_launcher's agent installs signal handlers, which only a main
        # thread may do; the fork shares this process's imported torch, so it starts at once.
        self._proc = multiprocessing.get_context("fork").Process(target=_reference_run, args=(home,))
        self._proc.start()

    def result(self) -> Path:
        """The reference's folder once the run has ended well (its epoch checked)."""
        self._proc.join(TIMEOUT)
        if self._proc.exitcode is None:
            self.stop()
            raise AssertionError(f"the reference run did not end within {TIMEOUT}s")
        assert self._proc.exitcode == 0, f"the reference run failed ({self._proc.exitcode}); see its stderr"
        _check_epoch(self.home / "ids")
        return self.home

    def stop(self) -> None:
        if self._proc.is_alive():
            self._proc.kill()
        self._proc.join()


def _reference_run(home: Path) -> None:
    script = _load_script()
    argv = [str(home / "project"), str(home / "ids"), str(home / "final.pt")]
    for processes, stop in ((2, 4), (1, 8), (2, 0)):
        debug_launcher(script.main, ([*argv, "--stop_at", str(stop)],), num_processes=processes)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Reference]:
    """The same world-size changes made deterministically: stop at the step and start again at the new size.

    The same script on real process groups (gloo), started by ``debug_launcher``: its processes fork
    from this one and skip importing torch, which makes the three phases cost seconds, not the
    half-minute of three ``accelerate launch`` runs. Each phase runs to its ``--stop_at`` step,
    saves and exits; the next phase resumes from that checkpoint at its own world size. The run goes
    on beside the elastic launch, which spends much of its time waiting (a dead node's heartbeats
    expiring, last calls): the test reads the reference last.
    """
    home = tmp_path_factory.mktemp("elastic-reference")
    (home / "ids").mkdir()
    running = _Reference(home)
    try:
        yield running
    finally:
        running.stop()


@pytest.mark.slow
def test_a_node_dies_the_survivor_continues_and_a_new_node_joins(
    tmp_path: Path, reference: _Reference
) -> None:
    ids = tmp_path / "ids"
    ids.mkdir()
    args = [str(tmp_path / "project"), str(ids), str(tmp_path / "final.pt"),
            "--block_at", "5", "--wait_at", "8", "--start_world", "2"]  # fmt: skip
    token = uuid.uuid4().hex

    def node(name: str, port: int) -> loopback.Node:
        return loopback.start_node(
            name, port, tmp_path, args, nnodes="1:2", num_processes=2, rdzv_conf=RDZV_CONF, token=token
        )

    with reserved_port() as port:
        nodes = [node("a", port), node("b", port)]
        try:
            loopback.wait_for([ids / "blocked-b"], nodes, "node b reaching step 5", TIMEOUT)
            loopback.kill_node(nodes[1])
            loopback.wait_for(
                [ids / "waiting-a"], nodes[:1], "the survivor reaching step 8 at world size 1", TIMEOUT
            )
            nodes.append(node("c", port))
            codes = [nodes[0].finish(TIMEOUT), nodes[2].finish(TIMEOUT)]
        finally:
            loopback.kill_running(nodes)
    loopback.wait_no_leftovers(token, 10)
    err_a, err_c = nodes[0].output(), nodes[2].output()
    assert codes == [0, 0], err_a + err_c
    steps = _check_epoch(ids)
    # 2 processes to step 5 (step 5 replayed), 1 process for steps 5-8, 2 processes for 9-14.
    sizes = {step: len(samples) // 2 for step, samples in steps.items()}
    assert sizes == {s: 2 if s <= 4 or s > 8 else 1 for s in range(1, 15)}, sizes
    expected = torch.load(reference.result() / "final.pt")
    got = torch.load(tmp_path / "final.pt")
    for key, tensor in expected.items():
        assert torch.equal(tensor, got[key]), key
    _check_membership_log(err_a, err_a + err_c)


def _check_membership_log(survivor: str, both: str) -> None:
    """One line per event before each re-formation, what was resumed, and the summary at the end."""
    events = [
        line for line in survivor.splitlines() if line.startswith("accelerate launch: membership: node")
    ]
    # Node a may have formed a group alone before node b arrived (the script then waits for b): that
    # join is an event too. The last two are always the death and the third node.
    assert len(events) in (2, 3), survivor
    assert events[-2].endswith("left; world size 2 -> 1"), events
    assert events[-1].endswith("joined; world size 1 -> 2"), events
    assert "(saved by 2 processes at optimizer step 4) on 1 process; 1 optimizer step(s) replayed" in both, (
        both
    )
    assert "(saved by 1 process at optimizer step 8) on 2 processes; 0 optimizer step(s) replayed" in both, (
        both
    )
    summary = survivor.split(f"accelerate launch: membership changes during the run ({len(events)}):", 1)[1]
    assert all(f"{i}. node" in summary for i in range(1, len(events) + 1)), survivor
