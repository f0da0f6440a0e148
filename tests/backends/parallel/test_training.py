"""TP, dp_shard x TP, dp_replicate x TP and HSDP train to the one-process full-batch parameters (gloo CPU processes)."""

from __future__ import annotations

import pytest
import torch

from tests.backends.parallel import workers as w
from tests.backends.parallel.models import reference_run
from tests.conftest import get_pool

TOPOLOGIES = {
    # name: (sizes, processes, data shards, mesh, (dp_replicate, dp_shard, tp) per rank, type)
    "tp2": ({"tp_size": 2}, 2, 1, (("tp",), (2,)), [(0, 0, 0), (0, 0, 1)], "MULTI_CPU"),
    "dp_shard2_tp2": (
        {"dp_shard_size": 2, "tp_size": 2}, 4, 2, (("dp_shard", "tp"), (2, 2)),
        [(0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1)], "FSDP",
    ),
    # Replication of a TP model: FSDP2's HSDP with a shard dimension of size 1 (DDP takes no DTensors).
    "dp_replicate2_tp2": (
        {"dp_replicate_size": 2, "tp_size": 2}, 4, 2, (("dp_replicate", "tp"), (2, 2)),
        [(0, 0, 0), (0, 0, 1), (1, 0, 0), (1, 0, 1)], "FSDP",
    ),
    "hsdp2x2": (
        {"dp_replicate_size": 2, "dp_shard_size": 2}, 4, 4, (("dp_replicate", "dp_shard"), (2, 2)),
        [(0, 0, 0), (0, 1, 0), (1, 0, 0), (1, 1, 0)], "FSDP",
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", list(TOPOLOGIES))
def test_topology_trains_to_the_one_process_parameters(name: str) -> None:
    sizes, procs, shards, mesh, ranks, kind = TOPOLOGIES[name]
    results = get_pool(procs).run(w.train, sizes, timeout=300)
    expected, norms = reference_run(w.STEPS, w.ACCUM, w.PER_RANK * shards, w.MAX_NORM)
    main = results[0]
    assert set(main["state"]) == set(expected)
    for key, value in expected.items():
        torch.testing.assert_close(main["state"][key], value, rtol=1e-5, atol=1e-5, msg=key)
    for rank, result in enumerate(results):
        assert result["norms"] == pytest.approx(norms, rel=1e-5)  # the global norm over every mesh dim
        assert result["mesh"] == mesh and result["type"] == kind and result["strategy"] == "parallel"
        assert result["ranks"][:3] == ranks[rank] and result["ranks"][3] == 0
        assert result["composable"]
        if kind == "FSDP":
            assert result["all_dtensor"]
            assert result["unsynced"] == [True] * w.STEPS * (w.ACCUM - 1)  # accumulate() skipped the sync
    # Every rank of one tensor-parallel group read the same batches; gather_for_metrics returns each once.
    group = procs // shards
    for rank, result in enumerate(results):
        torch.testing.assert_close(result["seen"], results[rank - rank % group]["seen"])
    everything = torch.cat([results[r]["seen"] for r in range(0, procs, group)])
    assert sorted(map(tuple, main["gathered"].tolist())) == sorted(map(tuple, everything.tolist()))
    assert main["gathered"].shape[0] == w.STEPS * w.ACCUM * w.PER_RANK * shards


def test_exact_resume_skips_the_same_batches_on_every_rank_of_a_tp_group() -> None:
    results = get_pool(4).run(w.resume_batches, {"dp_shard_size": 2, "tp_size": 2}, 3, timeout=300)
    for rank, result in enumerate(results):
        assert len(result["whole"]) == 8 and len(result["resumed"]) == 5
        for got, expected in zip(result["resumed"], result["whole"][3:], strict=True):
            torch.testing.assert_close(got, expected)
        mate = results[rank - rank % 2]  # the other rank of its tensor-parallel pair
        for got, expected in zip(result["resumed"], mate["resumed"], strict=True):
            torch.testing.assert_close(got, expected)
    assert not torch.equal(results[0]["whole"][0], results[2]["whole"][0])  # the two data shards differ
