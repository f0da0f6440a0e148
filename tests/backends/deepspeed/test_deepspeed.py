"""DeepSpeed ZeRO 1-3 on two real CPU processes (DS_ACCELERATOR=cpu, gloo): the five-line loop matches torch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.backends.deepspeed import deepspeed_payloads as payloads
from tests.helpers.pool import WorkerPool

pytest.importorskip("deepspeed", reason="DeepSpeed tests need deepspeed (make test installs it)")

ENV = {"DS_ACCELERATOR": "cpu"}


@pytest.fixture
def ds_pool(ds_pools: dict[int, WorkerPool]) -> WorkerPool:
    return ds_pools[2]  # shared with this folder's other modules (conftest.py)


def _close(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], atol: float) -> None:
    assert got.keys() == want.keys()
    for name in want:
        torch.testing.assert_close(
            got[name], want[name], atol=atol, rtol=0, msg=lambda m, n=name: f"{n}: {m}"
        )


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_zero_matches_full_batch_torch(ds_pool: WorkerPool, stage: int) -> None:
    results = ds_pool.run(payloads.train, stage, env=ENV, timeout=300)
    want = payloads.reference_weights(batch_size=8)
    for rank in results:
        assert rank["distributed_type"] == "DEEPSPEED"
        # DeepSpeed flattens the parameters into one buffer per group and averages the gradients
        # with a pre-division by the world size: the same AdamW math, rounded differently (1e-5).
        _close(rank["weights"], want, atol=1e-5)


@pytest.mark.parametrize("stage", [2, 3])
def test_save_state_load_state_continues_identically(ds_pool: WorkerPool, tmp_path: Any, stage: int) -> None:
    folder = str(tmp_path / "ckpt")
    straight = ds_pool.run(payloads.save_midway, stage, folder, 3, env=ENV, timeout=300)
    # upstream's layout: the engine's own checkpoint under pytorch_model/, inside our committed folder
    names = {p.relative_to(folder).as_posix() for p in Path(folder).rglob("*") if p.is_file()}
    assert "accelerate_manifest.json" in names and "random_states_1.pkl" in names
    assert any(n.startswith("pytorch_model/") and "optim_states" in n for n in names)
    resumed = ds_pool.run(payloads.resume, stage, folder, 3, env=ENV, timeout=300)
    for a, b in zip(straight, resumed, strict=True):
        assert a["lr"] == b["lr"]
        _close(b["weights"], a["weights"], atol=0)
    # loading it under another ZeRO stage or world size: test_deepspeed_portable.py


def test_accumulation_matches_big_batch(ds_pool: WorkerPool) -> None:
    results = ds_pool.run(payloads.train, 2, batch_size=2, gas=2, env=ENV, timeout=300)
    # 2 ranks x micro-batch 2 x 2 accumulation steps = one update per 8 samples, as torch with batches of 4, 2 steps.
    want = payloads.reference_weights(batch_size=4, steps_per_update=2)
    for rank in results:
        assert rank["engine_gas"] == 2 and rank["engine_config_micro"] == 2
        _close(rank["weights"], want, atol=1e-5)


def test_zero3_ranks_hold_half_the_parameters(ds_pool: WorkerPool) -> None:
    results = ds_pool.run(payloads.train, 3, hf_ds_config=payloads.ZERO3_CONFIG, env=ENV, timeout=300)
    total = results[0]["total_numel"]
    for rank in results:
        assert rank["local_numel"] == 0  # released after each forward/backward: only the partition stays
        # each rank keeps its half, padded by at most one element per parameter (4 tensors here)
        assert total / 2 <= rank["partitioned_numel"] <= total / 2 + 4


def test_bf16_trains(ds_pool: WorkerPool) -> None:
    for rank in ds_pool.run(payloads.bf16_facts, env=ENV, timeout=300):
        assert rank["dtype"] == "torch.bfloat16" and rank["config_bf16"] is True
        assert rank["last"] < 0.7 * rank["first"]


def test_zero3_save_model_gives_full_weights(ds_pool: WorkerPool, tmp_path: Any) -> None:
    results = ds_pool.run(payloads.save_model_zero3, str(tmp_path / "model"), env=ENV, timeout=300)
    loaded = results[0]["loaded"]
    assert {k: tuple(v.shape) for k, v in loaded.items()} == {
        k: tuple(v.shape) for k, v in results[0]["want"].items()
    }
    _close(
        loaded, results[0]["want"], atol=0
    )  # the freshly prepared model's weights, gathered from both ranks


def test_user_json_with_auto_values(ds_pool: WorkerPool) -> None:
    for rank in ds_pool.run(payloads.train_auto_config, env=ENV, timeout=300):
        assert (rank["micro"], rank["gas"], rank["train_batch_size"]) == (2, 2, 8)
        assert rank["lr_max"] == 0.02 and rank["clipping"] == 1.0  # upstream's value for "auto" clipping
        assert rank["lr_now"] == [0.02]  # WarmupLR reached its max after 3 warm-up steps
        assert rank["last"] < rank["first"]


def test_zero3_init_builds_partitioned_and_trains_like_torch(ds_pool: WorkerPool) -> None:
    results = ds_pool.run(payloads.zero3_init_and_gather, env=ENV, timeout=300)
    want_initial = payloads.make_model()[0].weight.detach()
    for rank in results:
        assert rank["ds_id"] and rank["numel"] == 0 and rank["partition"] == want_initial.numel() // 2
        torch.testing.assert_close(rank["gathered"], want_initial, atol=0, rtol=0)
    # ZeRO-3's gathered state dict is complete on the main process (as upstream's get_state_dict)
    _close(results[0]["weights"], payloads.reference_weights(batch_size=8), atol=1e-5)


def test_save_state_with_an_engine_without_optimizer_fails_clearly_instead_of_hanging(
    ds_pool: WorkerPool, tmp_path: Any
) -> None:
    # DeepSpeed's save_checkpoint of such an engine failed on rank 0 only while rank 1 waited.
    for message in ds_pool.run(
        payloads.save_with_an_engine_without_optimizer, str(tmp_path / "c"), env=ENV, timeout=120
    ):
        assert "engine 1 (Linear) was prepared without an optimizer" in message
    assert not (tmp_path / "c").exists()


def test_free_memory_forgets_the_engines_so_a_new_prepare_trains_and_saves_alone(
    ds_pool: WorkerPool, tmp_path: Any
) -> None:
    folder = tmp_path / "ckpt"
    results = ds_pool.run(payloads.prepare_again_after_free_memory, str(folder), env=ENV, timeout=300)
    assert [r["engines"] for r in results] == [1, 1]
    _close(results[0]["weights"], payloads.reference_weights(batch_size=8), atol=1e-5)
    assert not (folder / "pytorch_model_1").exists()  # only the new engine's checkpoint


def test_regional_compilation_compiles_the_engines_blocks_in_place(ds_pool: WorkerPool) -> None:
    # As upstream: compile_regions_deepspeed(engine.module) after the engine is built (ZeRO-3's hooks stay).
    for rank in ds_pool.run(payloads.regional_compilation_facts, env=ENV, timeout=300):
        assert rank == {"module_is_the_model": True, "blocks_compiled": [True] * 3, "loss_finite": True}
