"""HSDP inside each replica group: 2 groups of 4 processes, ``ParallelismConfig(dp_replicate_size=2,
dp_shard_size=2)``. FSDP2 averages the gradient inside the group (reduce-scatter over dp_shard,
all-reduce over dp_replicate), then each process averages its shard with its same-rank peer of the
other group; group 1 starts from other weights, and at the first quorum each rank heals its own
shard from its same-rank peer (or is the source). Both groups end equal to one process training the same batches, with the
reference's learning rate, and the checkpoint records the group's layout. (No kill here: 8 processes
are what two cores carry; the chaos test kills an FSDP2 group of 2.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("torchft")

from accelerate.backends.fault_tolerance.manager import lighthouse_address, start_lighthouse  # noqa: E402
from tests.backends.fault_tolerance.chaos import reference  # noqa: E402
from tests.backends.fault_tolerance.launched import run_groups  # noqa: E402
from tests.backends.fault_tolerance.problem import make_model  # noqa: E402


@pytest.mark.timeout(300)
def test_hsdp_groups_average_after_the_in_group_reduction_and_heal_by_shard(tmp_path: Path) -> None:
    server = start_lighthouse("127.0.0.1:0", min_replicas=2, join_timeout_ms=2000)
    lighthouse = lighthouse_address(server, "127.0.0.1")
    run_groups(
        [
            [
                "--num_processes", "4", "--fault_tolerance", "--ft_lighthouse", lighthouse,
                "--ft_replica_group_id", str(group), "--ft_num_replica_groups", "2", "--ft_min_replicas", "2",
                "-m", "tests.backends.fault_tolerance.hsdp_worker", str(tmp_path),
            ]
            for group in (0, 1)
        ],
        server=server,
        timeout=280,
    )  # fmt: skip
    runs = {
        (g, r): json.loads((tmp_path / f"hsdp_{g}_{r}.json").read_text()) for g in (0, 1) for r in range(4)
    }
    assert all(run["sharded"] for run in runs.values())

    def steps(run: dict[str, Any]) -> list[tuple[int, int, int]]:
        return [(r["step"], r["position"], r["contributors"]) for r in run["records"] if r["committed"]]

    assert all(steps(run) == steps(runs[(0, 0)]) for run in runs.values())  # every process, the same steps
    committed = [record for record in runs[(0, 0)]["records"] if record["committed"]]
    assert len(committed) == 4
    # At the first quorum (init_sync) each rank heals from its same-rank peer or is the source, rank
    # by rank: for each rank exactly one of the two groups healed. Group 1 started from weights moved
    # by 1.0, so the run started, shard by shard (dim 0 cut over dp_shard; rank = 2 * replica + shard),
    # from the weights of the group that was the source for that shard.
    healed = {r: [g for g in (0, 1) if runs[(g, r)]["heal_s"] is not None] for r in range(4)}
    assert all(len(groups) == 1 for groups in healed.values()), healed
    assert healed[0] == healed[2] and healed[1] == healed[3], healed  # a shard's replicas agree
    source = {shard: 1 - healed[shard][0] for shard in (0, 1)}
    start = {}
    for key, value in make_model().state_dict().items():
        parts = [part + source[shard] for shard, part in enumerate(torch.chunk(value, 2, dim=0))]
        start[key] = torch.cat(parts)
    expected, expected_lr = reference(committed, start)
    first = runs[(0, 0)]["params"]
    for run in runs.values():
        assert run["params"] == first  # every process of both groups holds the same full weights
        assert run["lr"] == pytest.approx(expected_lr, abs=1e-12)
        assert run["layout"] == "FSDP2 over 4 processes, mesh dp_replicate=2 x dp_shard=2"
    for key, value in expected.items():
        torch.testing.assert_close(torch.tensor(first[key]).view_as(value), value, rtol=0, atol=1e-5)
