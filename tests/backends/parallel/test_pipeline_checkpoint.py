"""save_state under pp=2: every rank writes its own stages; the folder resumes under pp=2 exactly, under
another split and with sharded stages, and loads the whole model in one process; save_model writes
whole tensors a plain model loads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.backends.parallel import pipeline_workers as pw
from tests.conftest import get_pool

_SAVED = {"pp_size": 2, "pp_schedule": "1F1B"}


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    """One pp=2 run that saves after three steps, shared by the loading tests."""
    folder = str(tmp_path_factory.mktemp("pp") / "ckpt")
    return folder, get_pool(2).run(pw.train_save_continue, _SAVED, folder, timeout=300)[0]


def _same(result: dict[str, torch.Tensor], expected: dict[str, torch.Tensor], atol: float) -> None:
    assert set(result) == set(expected)
    for key, value in expected.items():
        torch.testing.assert_close(result[key], value, rtol=atol, atol=atol, msg=lambda m, k=key: f"{k}: {m}")


def test_pp2_checkpoint_resumes_under_pp2_exactly(saved: tuple[str, dict[str, Any]]) -> None:
    folder, run = saved
    for result in get_pool(2).run(pw.resume_continue, _SAVED, folder, timeout=300):
        _same(result, run["end"], atol=0)


def test_pp2_checkpoint_loads_as_a_whole_model_in_one_process(saved: tuple[str, dict[str, Any]]) -> None:
    folder, run = saved
    _same(get_pool(2).run(pw.resume_continue, {}, folder, timeout=300)[0], run["at_save"], atol=0)


@pytest.mark.parametrize(
    ("world", "sizes"),
    [
        (2, {"pp_size": 2, "pp_split_points": ["blocks.0"], "pp_schedule": "GPipe"}),  # another split
        (
            4,
            {"pp_size": 2, "dp_shard_size": 2, "pp_microbatches": 1, "pp_schedule": "GPipe"},
        ),  # the stages sharded now
    ],
    ids=["other_split", "sharded_stages"],
)
def test_pp2_checkpoint_resumes_under_another_layout(
    saved: tuple[str, dict[str, Any]], world: int, sizes: dict[str, Any]
) -> None:
    folder, run = saved  # weights and optimizer state: the next step lands where the saving run's did
    for result in get_pool(world).run(pw.resume_continue, sizes, folder, timeout=300):
        _same(result, run["end"], atol=1e-5)


def test_pp2_save_model_writes_whole_tensors_a_plain_model_loads(saved: tuple[str, dict[str, Any]]) -> None:
    from safetensors.torch import load_file

    folder, run = saved
    files = sorted(Path(folder, "model").glob("*.safetensors"))
    assert [f.name for f in files] == ["model.safetensors"]
    model = pw.make_model(seed=5)
    model.load_state_dict(load_file(str(files[0])))  # strict: every tensor whole, under the model's names
    _same({k: v.detach() for k, v in model.state_dict().items()}, run["at_save"], atol=0)


def test_sharded_stages_checkpoint_loads_whole_and_resumes_under_pp2(tmp_path: Path) -> None:
    folder = str(tmp_path / "ckpt")
    sizes = {"pp_size": 2, "dp_shard_size": 2, "pp_microbatches": 1, "pp_schedule": "GPipe"}
    run = get_pool(4).run(pw.train_save_continue, sizes, folder, timeout=300)[0]  # DCP of FSDP2 shards
    _same(get_pool(2).run(pw.resume_continue, {}, folder, timeout=300)[0], run["at_save"], atol=0)
    for result in get_pool(2).run(pw.resume_continue, _SAVED, folder, timeout=300):
        _same(result, run["end"], atol=1e-5)


def test_pp2_load_state_midway_with_a_stateless_optimizer(tmp_path: Path) -> None:
    """Plain SGD keeps no per-parameter state: its checkpoint holds only the param groups, each rank's own."""
    folder = str(tmp_path / "ckpt")
    for result in get_pool(2).run(pw.sgd_reload_midway, _SAVED, folder, timeout=120):
        _same(result["again"], result["first"], atol=0)


def test_pp4_checkpoint_loads_whole_and_resumes_under_pp2(tmp_path: Path) -> None:
    """Four stages of the two-block model (embedding | block 0 | block 1 | norm and head), saved by four
    ranks, each holding only its stage: loads whole in one process and resumes under pp=2."""
    folder = str(tmp_path / "ckpt")
    sizes = {
        "pp_size": 4,
        "pp_split_points": ["blocks.0", "blocks.1", "norm"],
        "pp_schedule": "GPipe",
        "pp_microbatches": 2,
    }
    run = get_pool(4).run(pw.train_save_continue, sizes, folder, timeout=300)[0]
    _same(get_pool(2).run(pw.resume_continue, {}, folder, timeout=300)[0], run["at_save"], atol=0)
    for result in get_pool(2).run(pw.resume_continue, _SAVED, folder, timeout=300):
        _same(result, run["end"], atol=1e-5)
