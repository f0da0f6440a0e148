"""Pipeline-parallel training (pp=2 on gloo CPU processes) reaches the one-process parameters."""

from __future__ import annotations

import pytest
import torch

from tests.backends.parallel import pipeline_workers as pw
from tests.backends.parallel.models import reference_run
from tests.backends.parallel.workers import ACCUM, MAX_NORM, PER_RANK, STEPS
from tests.conftest import get_pool


@pytest.mark.parametrize("schedule", ["GPipe", "1F1B", "Interleaved1F1B"])
def test_pp2_trains_to_the_one_process_parameters(schedule: str) -> None:
    results = get_pool(2).run(pw.train, {"pp_size": 2, "pp_schedule": schedule}, timeout=300)
    expected, norms = reference_run(STEPS, ACCUM, PER_RANK, MAX_NORM)
    ref_losses, ref_eval, ref_out = pw.reference_losses()
    merged: dict[str, torch.Tensor] = {}
    for result in results:
        assert not set(result["stage"]) & set(merged)  # each rank's optimizer holds only its stage
        merged.update(result["stage"])
    assert set(merged) == {k for k in expected if k in results[0]["all_names"]}
    for key, value in merged.items():
        torch.testing.assert_close(value, expected[key], rtol=1e-5, atol=1e-5, msg=key)
    for result in results:  # get_state_dict: the whole trained model, on every rank
        # Once cut, a rank holds only its stages' weights: about half the model each (exactly the
        # parameters its optimizer trains, the tiny model has no buffers).
        own = sum(v.numel() * v.element_size() for v in result["stage"].values())
        assert result["bytes_after"] == own, (result["bytes_after"], own)
        assert 0.4 < result["bytes_after"] / result["bytes_before"] < 0.6, result["bytes_after"]
        assert set(result["whole"]) == set(expected)
        for key, value in expected.items():
            torch.testing.assert_close(result["whole"][key], value, rtol=1e-5, atol=1e-5, msg=key)
        assert result["strategy"] == "parallel" and schedule in result["describe"]
        assert result["norms"] == pytest.approx(norms, rel=1e-5)  # the global norm over both stages
        assert sorted(map(tuple, result["gathered"].tolist())) == sorted(
            map(tuple, pw.dataset(result["samples"])[0].tolist())
        )
        assert result["losses"] == pytest.approx(ref_losses, rel=1e-5)  # every rank reports the loss
        assert result["eval_loss"] == pytest.approx(ref_eval, rel=1e-5)
        torch.testing.assert_close(result["eval_out"], ref_out, rtol=1e-5, atol=1e-5)
        # The last stage does not wait for the others to receive its loss (it is awaited at the next
        # call); the other ranks' loss is final when returned (read at once above, right every step).
        assert result["sending"] == [result["last_stage"]] * len(result["sending"])
        assert result["settled"]


def test_pp2_x_dp_replicate2_trains_to_the_one_process_parameters() -> None:
    sizes = {"pp_size": 2, "dp_replicate_size": 2, "pp_schedule": "1F1B"}
    results = get_pool(4).run(pw.train, sizes, timeout=300)
    expected, norms = reference_run(STEPS, ACCUM, 2 * PER_RANK, MAX_NORM)
    # pp follows dp_replicate: ranks 0, 1 hold stages 0, 1 of replica 0; ranks 2, 3 of replica 1.
    for replica in (results[0:2], results[2:4]):
        merged = {**replica[0]["stage"], **replica[1]["stage"]}
        assert set(merged) == set(expected)
        for key, value in merged.items():
            torch.testing.assert_close(value, expected[key], rtol=1e-5, atol=1e-5, msg=key)
    for result in results:
        assert result["norms"] == pytest.approx(norms, rel=1e-5)
        # gather_for_metrics returns each sample once: two replicas' shards, not one copy per stage
        assert sorted(map(tuple, result["gathered"].tolist())) == sorted(
            map(tuple, pw.dataset(result["samples"])[0].tolist())
        )


def test_pp2_x_dp_shard2_trains_to_the_one_process_parameters() -> None:
    sizes = {"pp_size": 2, "dp_shard_size": 2, "pp_schedule": "1F1B"}
    results = get_pool(4).run(pw.train, sizes, timeout=300)
    expected, norms = reference_run(STEPS, ACCUM, 2 * PER_RANK, MAX_NORM)
    # pp follows dp_shard: ranks 0, 1 hold stages 0, 1 of data shard 0; ranks 2, 3 the same stages of shard 1.
    for shard in (results[0:2], results[2:4]):
        merged = {**shard[0]["stage"], **shard[1]["stage"]}
        assert set(merged) == set(expected)
        for key, value in merged.items():
            torch.testing.assert_close(value, expected[key], rtol=1e-5, atol=1e-5, msg=key)
    for result in results:
        assert "each stage FSDP2 over dp_shard" in result["describe"]
        assert result["norms"] == pytest.approx(norms, rel=1e-5)  # over both stages and both shards
        for key, value in expected.items():
            torch.testing.assert_close(result["whole"][key], value, rtol=1e-5, atol=1e-5, msg=key)
        assert sorted(map(tuple, result["gathered"].tolist())) == sorted(
            map(tuple, pw.dataset(result["samples"])[0].tolist())
        )


def test_transformers_llama_under_pp2_returns_its_own_loss() -> None:
    """No pp_loss_fn: the model's own loss from labels= runs on the last stage; `.loss` as usual."""
    pytest.importorskip("transformers")
    expected = pw.llama_reference()
    for result in get_pool(2).run(pw.llama_own_loss, {"pp_size": 2, "pp_schedule": "GPipe"}, timeout=300):
        assert result["losses"] == pytest.approx(expected["losses"], rel=1e-5)
        assert result["eval_loss"] == pytest.approx(expected["eval_loss"], rel=1e-5)
        assert set(result["whole"]) == set(expected["whole"])
        for key, value in expected["whole"].items():
            torch.testing.assert_close(result["whole"][key], value, rtol=1e-5, atol=1e-5, msg=key)
