"""ParallelismConfig's pipeline fields: defaults, the pp mesh dimension, and clear errors at construction."""

from __future__ import annotations

import pytest
import torch.nn.functional as F

from accelerate.parallelism_config import ParallelismConfig
from accelerate.state.pipeline_options import check_batch, microbatches, stages_per_rank


def test_pp_follows_the_data_parallel_dimensions_with_1f1b_and_one_microbatch_per_stage_by_default() -> None:
    config = ParallelismConfig(pp_size=2, dp_replicate_size=2)
    assert config.pp_enabled and config.total_size == 4 and config.pp_schedule == "1F1B"
    assert config._get_mesh() == (("dp_replicate", "pp"), (2, 2))
    assert config.non_dp_dim_names == ["pp"] and config.non_data_parallel_size == 2
    assert [config.coordinates(r)["pp"] for r in range(4)] == [0, 1, 0, 1]
    assert config.data_parallel_index(0) == config.data_parallel_index(1)  # both stages read one shard
    assert microbatches(config) == 2 and stages_per_rank(config) == 1 and config.pp_split_points == "auto"
    assert stages_per_rank(ParallelismConfig(pp_size=2, pp_schedule="Interleaved1F1B")) == 2
    assert microbatches(ParallelismConfig(pp_size=2, pp_microbatches=8)) == 8
    assert ParallelismConfig(pp_size=2, pp_split_points=("blocks.1",)).pp_split_points == ["blocks.1"]
    assert ParallelismConfig(pp_loss_fn=F.mse_loss).to_json()  # the function serialises as its repr


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"pp_size": 0}, r"pp_size=0\) must be an integer >= 1"),
        ({"pp_schedule": "ZeroBubble"}, r"pp_schedule='ZeroBubble'\) is not a pipeline schedule; use one of"),
        ({"pp_microbatches": 0}, r"pp_microbatches=0\) must be an integer >= 1"),
        ({"pp_split_points": "blocks.1"}, r"must be 'auto' \(balanced by parameter size\) or a list"),
        ({"pp_loss_fn": "mse"}, r"pp_loss_fn='mse'\) must be callable"),
        (
            {"pp_size": 2, "pp_microbatches": 1},
            r"pp_schedule='1F1B', pp_microbatches=1\) needs at least pp_size=2",
        ),
        (
            {"pp_size": 2, "pp_microbatches": 5, "pp_schedule": "Interleaved1F1B"},
            r"pp_microbatches=5\) must be a multiple of its rounds \(2",
        ),
    ],
)
def test_bad_pipeline_options_raise_naming_the_field(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ParallelismConfig(**kwargs)  # type: ignore[arg-type]


def test_a_batch_that_does_not_cut_into_the_microbatches_is_refused() -> None:
    config = ParallelismConfig(pp_size=2, pp_microbatches=4)
    check_batch(config, 8)
    with pytest.raises(ValueError, match=r"A batch of 6 rows cannot be cut into .*pp_microbatches=4"):
        check_batch(config, 6)
