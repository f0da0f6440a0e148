"""`accelerate merge-weights` recognises each checkpoint folder of ours and says which it found: here the plain
save_state folder (one whole model file, checked against the manifest) and the folders it refuses. FSDP2 and N-D
folders: tests/commands/test_merge_weights_fsdp.py and tests/backends/parallel/test_checkpoint.py; DeepSpeed ZeRO
1-3: tests/backends/deepspeed/test_deepspeed_portable.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from accelerate.backends.merge import merge_weights
from accelerate.storage.errors import CheckpointError
from accelerate.storage.model_files import load_state_dict_file
from tests.commands.helpers import run_cli


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(16, 8), torch.nn.Linear(8, 8), torch.nn.Linear(8, 16))
    model[2].weight = model[0].weight  # tied, like an LM head
    return model


@pytest.fixture
def plain_checkpoint(tmp_path: Path) -> Path:
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    accelerator.prepare(_model())
    accelerator.save_state(str(tmp_path / "ckpt"))
    return tmp_path / "ckpt"


def test_a_plain_save_state_folder_is_copied_and_loads_strictly(
    plain_checkpoint: Path, tmp_path: Path
) -> None:
    result = run_cli("merge-weights", str(plain_checkpoint), str(tmp_path / "out"), home=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (
        "found a whole model file model.safetensors (plain or DDP save_state; checked against the manifest)"
        in result.stdout
    )
    fresh = torch.nn.Sequential(torch.nn.Embedding(16, 8), torch.nn.Linear(8, 8), torch.nn.Linear(8, 16))
    fresh[2].weight = fresh[0].weight
    fresh.load_state_dict(load_state_dict_file(tmp_path / "out" / "model.safetensors"), strict=True)
    for name, value in _model().state_dict().items():
        assert torch.equal(fresh.state_dict()[name], value), name


def test_a_damaged_model_file_is_named(plain_checkpoint: Path, tmp_path: Path) -> None:
    path = plain_checkpoint / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="model.safetensors is corrupted"):
        merge_weights(str(plain_checkpoint), str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_an_unknown_folder_says_what_was_looked_for(tmp_path: Path) -> None:
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "notes.txt").write_text("hello")
    result = run_cli("merge-weights", str(tmp_path / "odd"), str(tmp_path / "out"), home=tmp_path)
    assert result.returncode == 2
    assert "is no checkpoint merge-weights knows" in result.stderr and "notes.txt" in result.stderr
    assert "pytorch_model_fsdp_0/.metadata" in result.stderr and "*_optim_states.pt" in result.stderr
