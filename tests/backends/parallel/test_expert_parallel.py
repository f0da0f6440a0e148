"""Expert parallelism (ep) on gloo CPU processes: tiny MoE models train to the one-process parameters."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.backends.parallel import ep_workers as w
from tests.conftest import get_pool


# Our own experts module (top-2), the same with every token sent to expert 0 (rank 1's experts get no
# token at all), and transformers' Qwen3-MoE and Mixtral built from a config.
@pytest.mark.parametrize("kind", ["own", "skewed", "qwen3_moe", "mixtral"])
def test_ep2_trains_to_the_one_process_parameters(kind: str) -> None:
    results = get_pool(2).run(w.train, {"ep_size": 2}, kind, timeout=300)
    expected, norms = w.reference(kind, 2)
    for result in results:
        assert result["norms"] == pytest.approx(norms, rel=1e-5)
        assert result["local_experts"] == [(w.EXPERTS // 2, *result["local_experts"][0][1:])] * 2  # half each
    if kind == "skewed":  # uneven load: rank 0 holds expert 0 and gets every token, rank 1 none
        # two layers, two ranks' tokens each
        assert sum(results[0]["received"]) == 2 * w.STEPS * w.ACCUM * 2 * w.PER_RANK * w.SEQ
        assert set(results[1]["received"]) == {0}
    assert "experts split over ep=2" in results[0]["describe"]
    for key, value in expected.items():
        torch.testing.assert_close(results[0]["state"][key], value, rtol=1e-5, atol=1e-5, msg=key)


# Four processes, ep=2 carved from the data-parallel ranks: FSDP2 over dp_shard=4 (two expert groups;
# each rank's experts FSDP-sharded with the rank holding the same ones in the other group), and HSDP
# (dp_replicate=2 x dp_shard=2) for the other weights.
@pytest.mark.parametrize(
    "sizes", [{"dp_shard_size": 4, "ep_size": 2}, {"dp_replicate_size": 2, "dp_shard_size": 2, "ep_size": 2}]
)
def test_four_processes_with_ep2_train_to_the_one_process_parameters(sizes: dict[str, int]) -> None:
    results = get_pool(4).run(w.train, sizes, "own", timeout=300)
    expected, norms = w.reference("own", 4)
    for result in results:
        assert result["norms"] == pytest.approx(norms, rel=1e-5)
        # FSDP2 shards each rank's experts over the 2 ranks that hold the same ones: a quarter of each layer's
        assert result["expert_meshes"] == [("ep_replicate", "ep")] * 2
        assert result["local_experts"] == [(w.EXPERTS // 4, *result["local_experts"][0][1:])] * 2
    assert "FSDP2 over dp_" in results[0]["describe"]
    for key, value in expected.items():
        torch.testing.assert_close(results[0]["state"][key], value, rtol=1e-5, atol=1e-5, msg=key)


# ep with tp: dp_shard=2 x tp=2, ep=2 carved from dp_shard. tp splits the embedding and head (ours) or the
# attention (Qwen3-MoE); each tp rank dispatches over its own expert group, the experts replicated over tp.
@pytest.mark.parametrize("kind", ["own", "qwen3_moe"])
def test_ep2_with_tp2_trains_to_the_one_process_parameters(kind: str) -> None:
    results = get_pool(4).run(w.train, {"dp_shard_size": 2, "tp_size": 2, "ep_size": 2}, kind, timeout=300)
    expected, norms = w.reference(kind, 2)
    for result in results:
        assert result["norms"] == pytest.approx(norms, rel=1e-5)
        assert result["local_experts"] == [(w.EXPERTS // 2, *result["local_experts"][0][1:])] * 2
    for rank in (1, 3):  # the tp peers' replicated experts stayed equal (ranks 0, 1 and 2, 3 are tp pairs)
        for mine, peer in zip(
            results[rank]["expert_pieces"], results[rank - 1]["expert_pieces"], strict=True
        ):
            torch.testing.assert_close(mine, peer, rtol=0, atol=0)
    for key, value in expected.items():
        torch.testing.assert_close(results[0]["state"][key], value, rtol=1e-5, atol=1e-5, msg=key)
    describe = results[0]["describe"]
    assert (
        "[dp_shard=2 x tp=2]: experts split over ep=2 (all-to-all token dispatch) and replicated over tp=2"
        in describe
    )


def test_an_ep2_state_loads_under_ep1_ep4_and_sharded_experts_and_save_model_writes_whole_experts(
    tmp_path: Path,
) -> None:
    folder, whole = str(tmp_path / "ckpt"), str(tmp_path / "model")
    saved = get_pool(2).run(w.train, {"ep_size": 2}, "own", folder, whole, timeout=300)[0]["state"]
    after = {
        "ep1": w.resume({}, folder, chunks=4),  # one process, the four ranks' batches as four pieces
        "ep4": get_pool(4).run(w.resume, {"ep_size": 4}, folder, timeout=300)[0],
        # experts FSDP-sharded over their two replicas (2-D shards)
        "dp_shard4_ep2": get_pool(4).run(w.resume, {"dp_shard_size": 4, "ep_size": 2}, folder, timeout=300)[
            0
        ],
    }
    for name, result in after.items():
        for key, value in saved.items():  # the experts resharded from 2 ranks to 1 and to 4
            torch.testing.assert_close(result["loaded"][key], value, msg=f"{name}: {key}")
    for key, value in after["ep1"]["state"].items():  # and the next step (momentum included) matches
        for name in ("ep4", "dp_shard4_ep2"):
            torch.testing.assert_close(
                after[name]["state"][key], value, rtol=1e-5, atol=1e-5, msg=f"{name}: {key}"
            )
    model = w.make("own")
    model.load_state_dict(load_file(str(Path(whole) / "model.safetensors")), strict=True)
    assert model.layers[0].experts.up.shape[0] == w.EXPERTS
    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, saved[key], msg=key)


def test_what_ep_cannot_split_is_an_error_naming_why() -> None:
    messages = get_pool(2).run(w.refusals, timeout=300)[0]
    assert "ep_size=2" in messages["odd"] and "layers.1.experts has num_experts=3" in messages["odd"]
    assert "has no experts module" in messages["dense"] and "Sequential" in messages["dense"]


def test_bf16_keeps_fp32_experts() -> None:
    for result in get_pool(2).run(w.bf16_step, timeout=300):
        assert math.isfinite(result["loss"])
        assert (result["dtype"], result["grad"]) == ("torch.float32", "torch.float32")
