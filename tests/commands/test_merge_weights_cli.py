"""`accelerate merge-weights`: real sharded checkpoints (save_model's shards, a torch.distributed.checkpoint
folder) merged into one file that loads back to the same tensors."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from accelerate.commands.merge import merge_fsdp_weights
from accelerate.storage.model_files import load_state_dict_file, save_model_files
from tests.commands.helpers import run_cli


def _state() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(16, 8), torch.nn.Linear(8, 8), torch.nn.Linear(8, 16))
    model[2].weight = model[0].weight  # tied, like an LM head
    return model.state_dict()


def test_cli_merges_safetensors_shards_and_removes_them(tmp_path: Path) -> None:
    state = _state()
    shards = tmp_path / "shards"
    written = save_model_files(state, shards, max_shard_size=400)
    assert len(written) > 2  # several shards plus the index
    out = tmp_path / "merged"
    result = run_cli("merge-weights", str(shards), str(out), "--remove_checkpoint_dir", home=tmp_path)
    assert result.returncode == 0, result.stderr
    merged = load_state_dict_file(out / "model.safetensors")
    assert sorted(merged) == sorted(state)
    for name, tensor in state.items():
        assert torch.equal(merged[name], tensor), name
    assert merged["2.weight"].data_ptr() == merged["0.weight"].data_ptr()  # still tied
    assert not shards.exists()


def test_unsafe_serialization_writes_a_bin_file(tmp_path: Path) -> None:
    state = _state()
    save_model_files(state, tmp_path / "shards", max_shard_size=400, safe_serialization=False)
    path = merge_fsdp_weights(str(tmp_path / "shards"), str(tmp_path / "out"), safe_serialization=False)
    assert path.name == "pytorch_model.bin"
    merged = load_state_dict_file(path)
    assert all(torch.equal(merged[k], v) for k, v in state.items())
    assert (tmp_path / "shards").is_dir()  # kept without --remove_checkpoint_dir


def test_a_distributed_checkpoint_folder_merges(tmp_path: Path) -> None:
    import torch.distributed.checkpoint as dcp

    state = {k: v.clone() for k, v in _state().items()}
    dcp.save({"model": state}, checkpoint_id=str(tmp_path / "dcp"), no_dist=True)
    path = merge_fsdp_weights(str(tmp_path / "dcp"), str(tmp_path / "out"))
    merged = load_state_dict_file(path)
    assert sorted(merged) == sorted(state)
    assert all(torch.equal(merged[k], v) for k, v in state.items())


def test_errors_name_the_problem(tmp_path: Path) -> None:
    result = run_cli("merge-weights", str(tmp_path / "nope"), str(tmp_path / "out"), home=tmp_path)
    assert result.returncode == 2 and "is not a folder" in result.stderr
    save_model_files(_state(), tmp_path / "shards", max_shard_size=400)
    with pytest.raises(ValueError, match="is the checkpoint folder itself"):
        merge_fsdp_weights(str(tmp_path / "shards"), str(tmp_path / "shards"))
    with pytest.raises(ValueError, match="would delete the merged file too"):
        merge_fsdp_weights(
            str(tmp_path / "shards"), str(tmp_path / "shards" / "m"), remove_checkpoint_dir=True
        )
