"""A state saved under (dp_shard=2, tp=2) on 4 processes reloads under other topologies and trains on."""

from __future__ import annotations

from pathlib import Path

import torch

from tests.backends.parallel import workers as w
from tests.conftest import get_pool

GLOBAL_BATCH = 8


def test_dp_shard_x_tp_checkpoint_reshards_to_other_topologies(tmp_path: Path) -> None:
    folder = str(tmp_path / "ckpt")
    saved = get_pool(4).run(w.train, {"dp_shard_size": 2, "tp_size": 2}, save_to=folder, timeout=300)[0][
        "state"
    ]
    assert (Path(folder) / "pytorch_model_fsdp_0").is_dir(), "the model is saved as a DCP folder"
    after = {
        "dp_shard4": get_pool(4).run(w.resume, {"dp_shard_size": 4}, folder, GLOBAL_BATCH, timeout=300)[0],
        "tp2": get_pool(2).run(w.resume, {"tp_size": 2}, folder, GLOBAL_BATCH, timeout=300)[0],
        "one_process": w.resume({}, folder, GLOBAL_BATCH),
    }
    for name, result in after.items():
        for key, value in saved.items():
            torch.testing.assert_close(result["loaded"][key], value, rtol=0, atol=0, msg=f"{name}: {key}")
    # One more step on the same global batch from the same model and optimizer state: the same result.
    reference = after["one_process"]["state"]
    for name in ("dp_shard4", "tp2"):
        for key, value in reference.items():
            torch.testing.assert_close(
                after[name]["state"][key], value, rtol=1e-5, atol=1e-5, msg=f"{name}: {key}"
            )


def test_tensor_parallel_size_without_a_plan_says_how_to_apply_one() -> None:
    for messages in get_pool(2).run(w.refusals, timeout=120):
        assert "tp_size=2" in messages["no_plan"] and "parallelize_module" in messages["no_plan"]
        assert "tp_plan='auto'" in messages["no_plan"] and "torch_device_mesh['tp']" in messages["no_plan"]
