"""save_state / load_state of FSDP2-sharded models on real gloo processes: saved by 2, loaded by 1, 2
and 4, resuming bitwise at the same world size; FULL_STATE_DICT; unsharded checkpoints into sharded
models; damaged files and mismatched shapes; save_model / get_state_dict and the utils helpers."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from accelerate.storage.atomic import read_manifest, verify_checkpoint
from accelerate.storage.errors import CheckpointError
from tests.backends.dtensor_io import workers as w
from tests.conftest import get_pool
from tests.helpers.pool import DistributedFailure


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One sharded run on 2 processes that saves at step SAVE_AT and trains on (spawned once)."""
    root = tmp_path_factory.mktemp("fsdp")
    ckpt = root / "ckpt"
    results = get_pool(2).run(w.save_then_finish, str(ckpt))
    yield {"ckpt": ckpt, "root": root, **results[0]}


def _assert_model_equal(expected: dict[str, torch.Tensor], got: dict[str, torch.Tensor]) -> None:
    assert sorted(got) == sorted(expected)
    for name, tensor in expected.items():
        assert torch.equal(got[name], tensor), name


def _assert_optimizer_equal(
    expected: dict[str, Any], got: dict[str, Any], names: list[str] | None = None
) -> None:
    """``expected`` keyed by parameter names; ``got`` too, or by position (then ``names`` maps them)."""
    state = got["state"] if names is None else {names[int(i)]: v for i, v in got["state"].items()}
    assert sorted(state) == sorted(expected["state"])
    for name, entries in expected["state"].items():
        for key, value in entries.items():
            assert torch.equal(torch.as_tensor(state[name][key]), torch.as_tensor(value)), (name, key)
    assert got["param_groups"][0]["lr"] == expected["param_groups"][0]["lr"]


def test_layout_is_upstreams_and_every_rank_file_is_in_the_manifest(saved: dict[str, Any]) -> None:
    ckpt = saved["ckpt"]
    manifest = verify_checkpoint(ckpt)  # every listed file: present, right size, right checksum
    for folder in ("pytorch_model_fsdp_0", "optimizer_0"):
        assert {f"{folder}/.metadata", f"{folder}/__0_0.distcp", f"{folder}/__1_0.distcp"} <= set(
            manifest.files
        )
    assert not (ckpt / "model.safetensors").exists() and not (ckpt / "optimizer.bin").exists()
    assert manifest.extra["fsdp"] == {
        "state_dict_type": "SHARDED_STATE_DICT",
        "models": [0],
        "optimizers": [0],
    }
    assert manifest.world_size == 2


def test_resume_on_two_processes_is_bitwise(saved: dict[str, Any]) -> None:
    resumed = get_pool(2).run(w.resume_and_finish, str(saved["ckpt"]))[0]
    at_save, loaded = saved["at_save"], resumed["loaded"]
    _assert_model_equal(at_save["model"], loaded["model"])
    _assert_optimizer_equal(at_save["optimizer"], loaded["optimizer"])
    assert loaded["scheduler"] == at_save["scheduler"] and loaded["step"] == w.SAVE_AT
    assert resumed["losses"] == saved["losses"]  # same data, same order, same numbers
    _assert_model_equal(saved["final"], resumed["final"])


def test_loads_into_one_unsharded_process(saved: dict[str, Any]) -> None:
    resumed = w.resume_and_finish(str(saved["ckpt"]), sharded=False)  # no process group at all
    at_save, loaded = saved["at_save"], resumed["loaded"]
    _assert_model_equal(at_save["model"], loaded["model"])
    names = list(at_save["model"])  # parameter order = optimizer order (this model has no buffers)
    _assert_optimizer_equal(at_save["optimizer"], loaded["optimizer"], names)
    assert loaded["scheduler"] == at_save["scheduler"] and loaded["step"] == w.SAVE_AT
    assert len(resumed["losses"]) == w.TOTAL_STEPS - w.SAVE_AT
    assert all(torch.isfinite(torch.tensor(resumed["losses"])))


def test_loads_into_an_unsharded_model_on_two_processes(saved: dict[str, Any]) -> None:
    resumed = get_pool(2).run(w.resume_and_finish, str(saved["ckpt"]), sharded=False)[0]
    _assert_model_equal(saved["at_save"]["model"], resumed["loaded"]["model"])
    _assert_optimizer_equal(
        saved["at_save"]["optimizer"], resumed["loaded"]["optimizer"], list(saved["at_save"]["model"])
    )


@pytest.mark.slow  # four spawned workers on a small machine
def test_reshards_onto_four_processes(saved: dict[str, Any]) -> None:
    pool = get_pool(4)
    try:
        results = pool.run(w.resume_and_finish, str(saved["ckpt"]), timeout=240)
    finally:
        pool.close()  # four workers on a small machine: give the cores back
    loaded = results[0]["loaded"]
    _assert_model_equal(saved["at_save"]["model"], loaded["model"])
    _assert_optimizer_equal(saved["at_save"]["optimizer"], loaded["optimizer"])
    assert loaded["step"] == w.SAVE_AT and len(results[0]["losses"]) == w.TOTAL_STEPS - w.SAVE_AT


def test_full_state_dict_type_writes_full_files_and_resumes(tmp_path: Path) -> None:
    ckpt = tmp_path / "full"
    pool = get_pool(2)
    first = pool.run(w.save_then_finish, str(ckpt), state_dict_type="FULL_STATE_DICT")[0]
    assert (ckpt / "pytorch_model_fsdp.bin").is_file() and (ckpt / "optimizer.bin").is_file()
    assert not (ckpt / "pytorch_model_fsdp_0").exists()
    resumed = pool.run(w.resume_and_finish, str(ckpt), state_dict_type="FULL_STATE_DICT")[0]
    _assert_model_equal(first["at_save"]["model"], resumed["loaded"]["model"])
    _assert_optimizer_equal(first["at_save"]["optimizer"], resumed["loaded"]["optimizer"])
    assert resumed["losses"] == first["losses"]
    # The gathered files load into one plain process too (names, not positions, key the optimizer).
    alone = w.resume_and_finish(str(ckpt), sharded=False)["loaded"]
    _assert_model_equal(first["at_save"]["model"], alone["model"])


def test_an_unsharded_checkpoint_loads_into_a_sharded_model(tmp_path: Path) -> None:
    ckpt = tmp_path / "plain"
    pool = get_pool(2)
    first = pool.run(w.save_then_finish, str(ckpt), sharded=False)[0]
    assert (ckpt / "model.safetensors").is_file() and (ckpt / "optimizer.bin").is_file()
    resumed = pool.run(w.resume_and_finish, str(ckpt))[0]
    at_save = first["at_save"]
    expected = {k.removeprefix("module."): v for k, v in at_save["model"].items()}  # DDP's prefix
    _assert_model_equal(expected, resumed["loaded"]["model"])
    _assert_optimizer_equal(resumed["loaded"]["optimizer"], at_save["optimizer"], list(expected))


def test_a_damaged_shard_file_is_named(saved: dict[str, Any], tmp_path: Path) -> None:
    ckpt = tmp_path / "damaged"
    shutil.copytree(saved["ckpt"], ckpt)
    shard = ckpt / "pytorch_model_fsdp_0" / "__1_0.distcp"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    # One rank verifies that file; every rank must hear of it rather than wait inside DCP's load.
    with pytest.raises(DistributedFailure, match=r"rank 0: .*__1_0\.distcp is corrupted"):
        get_pool(2).run(w.resume_and_finish, str(ckpt), timeout=60)
    with pytest.raises(CheckpointError, match=r"__1_0\.distcp is corrupted"):
        w.resume_and_finish(str(ckpt), sharded=False)


def test_a_checkpoint_of_other_shapes_names_the_tensor(saved: dict[str, Any]) -> None:
    from accelerate.backends.dtensor_io.dcp import load_model_dcp

    wider = w.TinyTransformer(width=8)
    with pytest.raises(
        CheckpointError, match=r"'proj\.weight' has shape \(6, 5\) in the checkpoint but \(8, 5\)"
    ):
        load_model_dcp(wider, saved["ckpt"] / "pytorch_model_fsdp_0")
    deeper = w.TinyTransformer(depth=4)
    with pytest.raises(CheckpointError, match=r"no tensor 'blocks\.3\.norm\.weight'"):
        load_model_dcp(deeper, saved["ckpt"] / "pytorch_model_fsdp_0")


def test_the_manifest_records_state_dict_type(saved: dict[str, Any]) -> None:
    manifest = read_manifest(saved["ckpt"])
    assert manifest is not None and manifest.extra["num_models"] == 1


def test_save_model_writes_full_safetensors_shards(tmp_path: Path) -> None:
    from accelerate.utils import load_checkpoint_in_model

    results = get_pool(2).run(w.save_model_and_state_dict, str(tmp_path / "model"))
    full = results[0]["full"]
    _assert_model_equal(full, results[0]["state_dict"])  # get_state_dict: the whole model on rank 0
    assert results[1]["state_dict"] == {}  # ... and nothing gathered on the others
    assert (tmp_path / "model" / "model.safetensors.index.json").is_file()
    plain = w.TinyTransformer()
    load_checkpoint_in_model(plain, str(tmp_path / "model"))
    _assert_model_equal(full, plain.state_dict())


@pytest.mark.parametrize("kind", ["SHARDED_STATE_DICT", "FULL_STATE_DICT"])
def test_utils_save_and_load_fsdp_model_and_optimizer(tmp_path: Path, kind: str) -> None:
    result = get_pool(2).run(w.api_round_trip, str(tmp_path), kind)[0]
    _assert_model_equal(result["saved"]["model"], result["loaded"]["model"])
    _assert_optimizer_equal(result["saved"]["optimizer"], result["loaded"]["optimizer"])
    expected = "pytorch_model_fsdp_0" if kind == "SHARDED_STATE_DICT" else "pytorch_model_fsdp.bin"
    assert (tmp_path / expected).exists()


def test_fsdp2_load_full_state_dict_broadcasts_from_process_zero() -> None:
    torch.manual_seed(7)
    state = w.TinyTransformer().state_dict()
    results = get_pool(2).run(w.broadcast_full_state, state)
    _assert_model_equal(state, results[0])


def test_save_model_of_a_sharded_transformers_model_loads_with_from_pretrained(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    full = get_pool(2).run(w.save_sharded_transformers_model, str(tmp_path))[0]
    loaded = transformers.GPT2LMHeadModel.from_pretrained(tmp_path).state_dict()
    _assert_model_equal(full, {k: v for k, v in loaded.items() if k in full})


def test_saving_over_an_existing_sharded_checkpoint_commits_in_place(
    saved: dict[str, Any], tmp_path: Path
) -> None:
    ckpt = tmp_path / "again"
    shutil.copytree(saved["ckpt"], ckpt)
    (ckpt / "pytorch_model_fsdp_0" / "__1_0.distcp").write_bytes(b"stale")  # overwritten by the new save
    pool = get_pool(2)
    first = pool.run(w.save_then_finish, str(ckpt))[0]
    verify_checkpoint(ckpt)
    assert not (ckpt / ".accelerate-staging").exists()
    resumed = pool.run(w.resume_and_finish, str(ckpt))[0]
    assert resumed["losses"] == first["losses"]


def test_async_save_of_a_sharded_model_is_refused_clearly(tmp_path: Path) -> None:
    # DCP's save runs collectives, which must not leave the training thread.
    messages = get_pool(2).run(w.async_save_is_refused, str(tmp_path / "ckpt"))
    for message in messages:
        assert "async_save=True" in message and "FSDP-sharded" in message and "async_save=False" in message
    assert not (tmp_path / "ckpt").exists()


def test_a_failure_of_the_writers_own_files_raises_everywhere_commits_nothing(tmp_path: Path) -> None:
    # Process 0 writes its own files before the shards (their fsyncs overlap); its failure waits
    # until the shards' collectives ran, so no process is left waiting in them.
    messages = get_pool(2).run(w.save_failing_on_the_writer, str(tmp_path / "ckpt"))
    for message in messages:
        assert (
            message.startswith("CheckpointError: save_state to ")
            and "rank 0: OSError: disk on fire" in message
        )
    assert not (tmp_path / "ckpt").exists()
    assert not any(tmp_path.iterdir())  # the staging folder is gone too


def test_a_shard_that_cannot_be_written_is_reported_as_a_full_disk(tmp_path: Path) -> None:
    # DCP wraps its writer's errors; the report must still say which file hit the limit and why.
    messages = get_pool(2).run(w.save_past_the_file_size_limit, str(tmp_path / "ckpt"), 64_000)
    for rank, message in enumerate(messages):
        # Every rank's disk "filled": each raises DiskFullError, as one process would.
        assert message.startswith("DiskFullError: save_state to "), message
        assert f"rank {rank}: DiskFullError: save_state to " in message, message
        assert f"pytorch_model_fsdp_0/__{rank}_0.distcp failed after 64000 bytes" in message, message
        # The whole checkpoint (model and AdamW state, gathered sizes), not this process's share.
        assert "RLIMIT_FSIZE" in message and "needs about 1.4 MB" in message, message
    assert not (tmp_path / "ckpt").exists()
