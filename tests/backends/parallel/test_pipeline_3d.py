"""3-D parallelism on 8 CPU processes: pipeline stages that are tensor-parallel and FSDP2-sharded.

One pool of 8 processes serves every scenario (a rendezvous on 2 cores is the expensive part).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.backends.parallel import pipeline_workers as pw
from tests.backends.parallel.models import reference_run
from tests.backends.parallel.workers import ACCUM, MAX_NORM, PER_RANK, STEPS
from tests.conftest import get_pool


def _check(results: list[dict[str, Any]], data_shards: int) -> None:
    expected, norms = reference_run(STEPS, ACCUM, data_shards * PER_RANK, MAX_NORM)
    covered: set[str] = set()
    for result in results:
        covered |= set(result["stage"])
        for key, value in result["stage"].items():  # what this rank's optimizer trains, gathered whole
            torch.testing.assert_close(value, expected[key], rtol=1e-5, atol=1e-5, msg=key)
        for key, value in expected.items():  # get_state_dict: the whole trained model on every rank
            torch.testing.assert_close(result["whole"][key], value, rtol=1e-5, atol=1e-5, msg=key)
        assert result["norms"] == pytest.approx(norms, rel=1e-5)  # over stages, shards and tp pieces
        assert sorted(map(tuple, result["gathered"].tolist())) == sorted(
            map(tuple, pw.dataset(result["samples"])[0].tolist())
        )
    assert covered == set(expected)


def test_pp2_x_dp_shard2_x_tp2_trains_to_the_one_process_parameters() -> None:
    sizes = {"pp_size": 2, "dp_shard_size": 2, "tp_size": 2, "pp_schedule": "1F1B"}
    results = get_pool(8).run(pw.train, sizes, timeout=600)
    assert "tensor-parallel stages" in results[0]["describe"]
    for result in results:  # 2-D shards: FSDP2 over dp_shard of the plan's tp pieces (and replicated tensors)
        assert {mesh for mesh, _ in result["layouts"]} == {("dp_shard", "tp")}
        assert any(placements[1].startswith("S(") for _, placements in result["layouts"])
    _check(results, data_shards=2)


def test_pp2_x_dp_replicate2_x_tp2_trains_to_the_one_process_parameters() -> None:
    sizes = {"pp_size": 2, "dp_replicate_size": 2, "tp_size": 2, "pp_schedule": "GPipe"}
    results = get_pool(8).run(pw.train, sizes, timeout=600)  # the same 8 processes as above
    assert "replicated over dp_replicate" in results[0]["describe"]
    _check(results, data_shards=2)


def test_pp2_x_tp2_trains_to_the_one_process_parameters() -> None:
    results = get_pool(4).run(pw.train, {"pp_size": 2, "tp_size": 2, "pp_schedule": "1F1B"}, timeout=300)
    assert results[0]["describe"].endswith("tensor-parallel stages on tp, no FSDP")
    _check(results, data_shards=1)
