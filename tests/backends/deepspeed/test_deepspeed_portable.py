"""DeepSpeed checkpoints that move: save_state under ZeRO-2 on two CPU processes, load_state under ZeRO-3 or
ZeRO-1, or on one process; weights and Adam's moments carry over, and the next steps match a run that did
not move. The same holds across bf16 (DeepSpeed's ZeRO optimizer and its BF16_Optimizer), ZeRO stage 0 and
CPU optimizer offload. `accelerate merge-weights` turns each ZeRO stage's folder into one file a plain model loads
strictly. A checkpoint that does not fit the model, or an engine that cannot take it, is refused before DeepSpeed
touches the engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from accelerate.backends.merge import merge_weights
from accelerate.storage.model_files import load_state_dict_file
from tests.backends.deepspeed import portable_payloads as payloads
from tests.backends.deepspeed.deepspeed_payloads import make_model
from tests.commands.helpers import run_cli
from tests.helpers.pool import WorkerPool

pytest.importorskip("deepspeed", reason="DeepSpeed tests need deepspeed (make test installs it)")

ENV = {"DS_ACCELERATOR": "cpu"}
SAVE_AFTER = 3


@pytest.fixture(scope="module")
def pools(ds_pools: dict[int, WorkerPool]) -> dict[int, WorkerPool]:
    return ds_pools  # shared with this folder's other modules (conftest.py)


@pytest.fixture(scope="module")
def zero2(pools: dict[int, WorkerPool], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The run that does not move: ZeRO-2, 2 processes, batches of 2 per process, saved after 3 steps."""
    folder = tmp_path_factory.mktemp("portable") / "ckpt"
    facts = pools[2].run(payloads.save_then_record, 2, str(folder), SAVE_AFTER, 2, env=ENV, timeout=300)[0]
    return {"folder": folder, **facts}


def _close(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], atol: float, rtol: float = 0) -> None:
    assert got.keys() == want.keys()
    for name in want:
        torch.testing.assert_close(
            got[name], want[name], atol=atol, rtol=rtol, msg=lambda m, n=name: f"{n}: {m}"
        )


@pytest.mark.parametrize(
    ("processes", "stage", "batch_size"),
    [(2, 3, 2), (2, 1, 2), (1, 2, 4)],  # one process: the same global batch of 4 in one piece
    ids=["zero2-to-zero3", "zero2-to-zero1", "2-to-1-process"],
)
def test_resume_under_another_stage_or_world_size_matches_the_run_that_did_not_move(
    pools: dict[int, WorkerPool], zero2: dict[str, Any], processes: int, stage: int, batch_size: int
) -> None:
    args = (stage, str(zero2["folder"]), SAVE_AFTER, batch_size)
    for rank in pools[processes].run(payloads.resume_elsewhere, *args, env=ENV, timeout=300):
        _close(rank["loaded"], zero2["loaded"], atol=0)  # the fp32 master weights, exactly
        _close(rank["exp_avg"], zero2["exp_avg"], atol=0)  # Adam's moments came along
        # the next step, and the rest of the epoch (on one process the gradient is averaged in another order)
        _close(rank["next"], zero2["next"], atol=1e-6)
        _close(rank["final"], zero2["final"], atol=1e-6)
        assert rank["lr"] == zero2["lr"] and rank["global_steps"] == zero2["global_steps"]


@pytest.fixture(scope="module")
def saved_runs(pools: dict[int, WorkerPool], tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Runs that do not move, saved once per (layout, processes) for the whole module."""
    made: dict[tuple[str, int], dict[str, Any]] = {}

    def saved(layout: str, processes: int) -> dict[str, Any]:
        if (layout, processes) not in made:
            folder = tmp_path_factory.mktemp("layouts") / f"{layout}-{processes}"
            batch = 4 // processes  # the same global batch of 4
            args = (layout, str(folder), SAVE_AFTER, batch)
            facts = pools[processes].run(payloads.save_then_record, *args, env=ENV, timeout=300)[0]
            made[layout, processes] = {"folder": folder, **facts}
        return made[layout, processes]

    return saved


# (saved layout, processes) -> (loading layout, processes); a layout is "<stage>[-bf16|-bf16opt][-offload]"
# (portable_payloads.layout_accelerator): bf16opt is DeepSpeed's separate BF16_Optimizer (ZeRO-1 with fp32
# gradient accumulation), offload the optimizer on the CPU (DeepSpeedCPUAdam)
MOVES = [
    (("1-bf16opt", 2), ("1-bf16opt", 1)),
    (("1-bf16", 1), ("1-bf16opt", 2)),
    (("2-bf16", 2), ("3-bf16", 2)),
    (("3-bf16", 2), ("2-bf16", 2)),
    (("0", 2), ("2", 2)),
    (("3", 2), ("0", 1)),
    (("0-bf16", 2), ("1-bf16", 2)),
    (("2-offload", 2), ("2", 1)),
    (("3", 2), ("3-offload", 2)),
]


@pytest.mark.parametrize(("source", "target"), MOVES, ids=[f"{a}x{n}-to-{b}x{m}" for (a, n), (b, m) in MOVES])
def test_bf16_and_stage0_checkpoints_move(
    pools: dict[int, WorkerPool], saved_runs: Any, source: tuple[str, int], target: tuple[str, int]
) -> None:
    straight = saved_runs(*source)
    layout, processes = target
    assert ("bf16opt" in source[0]) == (straight["optimizer"] == "BF16_Optimizer"), straight["optimizer"]
    args = (layout, str(straight["folder"]), SAVE_AFTER, 4 // processes)
    for rank in pools[processes].run(payloads.resume_elsewhere, *args, env=ENV, timeout=300):
        _close(rank["loaded"], straight["loaded"], atol=0)
        _close(rank["exp_avg"], straight["exp_avg"], atol=0)
        # bf16 weights on another world size: the gradients are summed in bf16 over other batch splits, so a
        # weight may round to the neighbouring bf16 value (one step: 2**-7 relative at most)
        rtol = 2**-7 if "bf16" in layout and processes != source[1] else 0
        _close(rank["next"], straight["next"], atol=1e-6, rtol=rtol)
        _close(rank["final"], straight["final"], atol=1e-6, rtol=rtol)
        assert rank["lr"] == straight["lr"] and rank["global_steps"] == straight["global_steps"]


def test_a_checkpoint_of_other_shapes_is_refused_before_the_engine_changes(
    pools: dict[int, WorkerPool], zero2: dict[str, Any]
) -> None:
    # the same layout (DeepSpeed's own load_checkpoint would copy the module, then fail) and a moved one
    for processes, stage in ((2, 2), (1, 3)):
        for rank in pools[processes].run(payloads.load_into_a_wider_model, stage, str(zero2["folder"]), env=ENV, timeout=300):  # fmt: skip
            assert (
                "parameter '0.weight' was saved with shape (16, 6) and the model has (24, 6)"
                in rank["message"]
            )
            assert "Nothing was loaded" in rank["message"] and rank["unchanged"]


def test_a_damaged_partition_is_named_before_anything_loads(
    pools: dict[int, WorkerPool], zero2: dict[str, Any], tmp_path: Path
) -> None:
    import shutil

    copy = tmp_path / "ckpt"
    shutil.copytree(zero2["folder"], copy)
    victim = copy / "pytorch_model" / "zero_pp_rank_1_mp_rank_00_optim_states.pt"
    data = bytearray(victim.read_bytes())
    data[200] ^= 0xFF
    victim.write_bytes(bytes(data))
    results = pools[1].run(payloads.load_into_a_wider_model, 2, str(copy), env=ENV, timeout=300)
    assert "zero_pp_rank_1_mp_rank_00_optim_states.pt is corrupted" in results[0]["message"]


def test_a_zero3_checkpoint_resumes_on_one_process_under_zero2(
    pools: dict[int, WorkerPool], tmp_path: Path
) -> None:
    folder = str(tmp_path / "z3")
    straight = pools[2].run(payloads.save_then_record, 3, folder, SAVE_AFTER, 2, env=ENV, timeout=300)[0]
    moved = pools[1].run(payloads.resume_elsewhere, 2, folder, SAVE_AFTER, 4, env=ENV, timeout=300)[0]
    _close(moved["loaded"], straight["loaded"], atol=0)
    _close(moved["exp_avg"], straight["exp_avg"], atol=0)
    _close(moved["final"], straight["final"], atol=1e-6)
    _assert_merges(Path(folder), straight["loaded"], tmp_path, stage=3)


def _assert_merges(folder: Path, want: dict[str, torch.Tensor], tmp_path: Path, *, stage: int) -> None:
    """merge-weights on the save_state folder and on its tag folder: a one-process model loads the file strictly."""
    for source in (folder, folder / "pytorch_model"):
        merged = merge_weights(str(source), str(tmp_path / f"merged-{source.name}"))
        assert merged.found.startswith(f"a DeepSpeed ZeRO-{stage} checkpoint saved by 2 process(es)"), (
            merged.found
        )
        model = make_model(seed=9)
        model.load_state_dict(load_state_dict_file(merged.path), strict=True)
        _close({k: v.float() for k, v in model.state_dict().items()}, want, atol=0)


def test_merge_weights_turns_a_zero2_folder_into_one_file(zero2: dict[str, Any], tmp_path: Path) -> None:
    result = run_cli("merge-weights", str(zero2["folder"]), str(tmp_path / "cli"), home=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "found a DeepSpeed ZeRO-2 checkpoint saved by 2 process(es)" in result.stdout
    model = make_model(seed=9)
    model.load_state_dict(load_state_dict_file(tmp_path / "cli" / "model.safetensors"), strict=True)
    _close(dict(model.state_dict()), zero2["loaded"], atol=0)
    _assert_merges(zero2["folder"], zero2["loaded"], tmp_path, stage=2)


def test_merge_weights_turns_a_zero1_folder_into_one_file(
    pools: dict[int, WorkerPool], tmp_path: Path
) -> None:
    folder = tmp_path / "z1"
    saved = pools[2].run(payloads.save_then_record, 1, str(folder), SAVE_AFTER, 2, env=ENV, timeout=300)[0]
    _assert_merges(folder, saved["loaded"], tmp_path, stage=1)


@pytest.mark.parametrize("engine", ["fsdp2", "zero3"])
def test_a_merged_file_starts_a_run_under_another_engine(
    pools: dict[int, WorkerPool], zero2: dict[str, Any], tmp_path: Path, engine: str
) -> None:
    # ZeRO-2 checkpoint -> merge-weights -> one file -> loaded before prepare under FSDP2 / ZeRO-3 (weights only:
    # optimizer state does not cross engines).
    merged = merge_weights(str(zero2["folder"]), str(tmp_path / "merged")).path
    folder = tmp_path / "started"
    results = pools[2].run(
        payloads.start_from_weights, engine, str(merged), str(folder), env=ENV, timeout=300
    )
    reference = make_model(seed=9)
    reference.load_state_dict(load_state_dict_file(merged), strict=True)
    optimizer = torch.optim.AdamW(reference.parameters(), lr=payloads.LR)
    x, y = payloads.make_data()[:8]  # the first global batch: 4 per process
    torch.nn.functional.mse_loss(reference(x), y).backward()
    optimizer.step()
    for rank in results[:1]:  # the gathered state dict is complete on the main process
        _close(rank["loaded"], zero2["loaded"], atol=0)
        _close(rank["stepped"], dict(reference.state_dict()), atol=1e-6)
    layout = "pytorch_model_fsdp_0" if engine == "fsdp2" else "pytorch_model"
    assert (folder / layout).is_dir() and (folder / "accelerate_manifest.json").is_file()


def test_merge_weights_reads_a_bf16_optimizer_folder(saved_runs: Any, tmp_path: Path) -> None:
    straight = saved_runs("1-bf16opt", 2)  # DeepSpeed's zero_to_fp32 does not read these files
    merged = merge_weights(str(straight["folder"]), str(tmp_path / "merged"))
    assert merged.found.startswith("a DeepSpeed BF16_Optimizer (ZeRO-1) checkpoint saved by 2 process(es)")
    model = make_model(seed=9)
    model.load_state_dict(load_state_dict_file(merged.path), strict=True)
    # the fp32 masters: rounded to bf16 they are the run's working weights
    _close({k: v.bfloat16().float() for k, v in model.state_dict().items()}, straight["loaded"], atol=0)


def test_an_nvme_swapped_or_unknown_optimizer_is_refused_before_anything_is_written() -> None:
    from types import SimpleNamespace

    from accelerate.backends.deepspeed.portable import _partitions
    from accelerate.storage.errors import CheckpointError

    with pytest.raises(
        CheckpointError, match="offloads its optimizer state to NVMe.*offload_optimizer.device: cpu"
    ):
        _partitions(SimpleNamespace(swap_optimizer=True, fp32_partitioned_groups_flat=[]), 3)
    with pytest.raises(CheckpointError, match=r"optimizer \(SimpleNamespace\) keeps its fp32 master weights"):
        _partitions(SimpleNamespace(), 2)
