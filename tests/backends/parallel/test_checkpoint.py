"""N-D checkpoints: a (dp_shard=2, tp=2) state reshards to other topologies and merges into whole tensors;
save_model of a tensor-parallel model writes files transformers loads."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from accelerate.utils import merge_fsdp_weights
from tests.backends.parallel import hf_workers as hw
from tests.backends.parallel import workers as w
from tests.commands.helpers import run_cli
from tests.conftest import get_pool

GLOBAL_BATCH = 8


def test_dp_shard_x_tp_checkpoint_reshards_to_other_topologies(tmp_path: Path) -> None:
    folder = str(tmp_path / "ckpt")
    saved = get_pool(4).run(w.train, {"dp_shard_size": 2, "tp_size": 2}, save_to=folder, timeout=300)[0][
        "state"
    ]
    assert (Path(folder) / "pytorch_model_fsdp_0").is_dir(), "the model is saved as a DCP folder"
    # merge-weights turns the DCP folder (tensors sharded over dp_shard and split over tp) into whole ones.
    merged = {
        "function": merge_fsdp_weights(folder, str(tmp_path / "merged_fn")),
        "cli": tmp_path / "merged_cli" / "model.safetensors",
    }
    result = run_cli("merge-weights", str(Path(folder) / "pytorch_model_fsdp_0"), str(merged["cli"].parent),
                     home=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    for how, path in merged.items():
        weights = load_file(str(path))
        assert set(weights) == set(saved), how
        for key, value in saved.items():
            torch.testing.assert_close(weights[key], value, rtol=0, atol=0, msg=f"{how}: {key}")
    after = {
        "dp_shard4": get_pool(4).run(w.resume, {"dp_shard_size": 4}, folder, GLOBAL_BATCH, timeout=300)[0],
        "tp2": get_pool(2).run(w.resume, {"tp_size": 2}, folder, GLOBAL_BATCH, timeout=300)[0],
        "dp_replicate2_tp2": get_pool(4).run(
            w.resume, {"dp_replicate_size": 2, "tp_size": 2}, folder, GLOBAL_BATCH, timeout=300
        )[0],
        "one_process": w.resume({}, folder, GLOBAL_BATCH),
    }
    for name, result in after.items():
        for key, value in saved.items():
            torch.testing.assert_close(result["loaded"][key], value, rtol=0, atol=0, msg=f"{name}: {key}")
    # One more step on the same global batch from the same model and optimizer state: the same result.
    reference = after["one_process"]["state"]
    for name in ("dp_shard4", "tp2", "dp_replicate2_tp2"):
        for key, value in reference.items():
            torch.testing.assert_close(
                after[name]["state"][key], value, rtol=1e-5, atol=1e-5, msg=f"{name}: {key}"
            )


def test_tensor_parallel_size_without_a_plan_says_how_to_apply_one() -> None:
    for messages in get_pool(2).run(w.refusals, timeout=120):
        assert "tp_size=2" in messages["no_plan"] and "parallelize_module" in messages["no_plan"]
        assert "tp_plan='auto'" in messages["no_plan"] and "torch_device_mesh['tp']" in messages["no_plan"]
        assert "rank 0: tp=2; rank 1: dp_shard=2" in messages["mismatch"], messages


@pytest.mark.parametrize(("sizes", "procs"), [({"tp_size": 2}, 2), ({"dp_shard_size": 2, "tp_size": 2}, 4)])
def test_save_model_of_a_tensor_parallel_model_loads_in_transformers(
    tmp_path: Path, sizes: dict[str, int], procs: int
) -> None:
    pytest.importorskip("transformers")
    from transformers import LlamaForCausalLM

    folder = tmp_path / "model"
    state = get_pool(procs).run(hw.save_tensor_parallel_llama, sizes, str(folder), timeout=300)[0]["state"]
    reference = hw.reference_state()
    assert set(state) == set(reference)
    for key, value in reference.items():  # whole tensors, the 1-process values (one SGD step)
        torch.testing.assert_close(state[key], value, rtol=1e-5, atol=1e-5, msg=key)
    hw.tiny_llama_config().save_pretrained(folder)  # save_model writes weights only, as upstream's does
    loaded = LlamaForCausalLM.from_pretrained(folder).state_dict()
    assert set(loaded) == set(state)
    for key, value in loaded.items():
        torch.testing.assert_close(value, state[key], rtol=0, atol=0, msg=key)
