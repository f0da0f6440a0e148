"""Misused pipeline parallelism fails with an error that names the setting and the fix."""

from __future__ import annotations

import re

import pytest

from accelerate import Accelerator
from accelerate.parallelism_config import ParallelismConfig
from accelerate.utils.dataclasses import DeepSpeedPlugin
from tests.backends.parallel import pipeline_workers as pw
from tests.conftest import get_pool


def test_pipeline_with_deepspeed_is_refused_before_any_process_group() -> None:
    with pytest.raises(ValueError, match=r"pp_size=2 \(pipeline parallelism\) and deepspeed_plugin"):
        Accelerator(
            cpu=True, parallelism_config=ParallelismConfig(pp_size=2), deepspeed_plugin=DeepSpeedPlugin()
        )


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("with_cp", r"NotAvailableYetError: ParallelismConfig\(pp_size=2, cp_size=2\): pipeline parallelism"),
        (
            "one_block",
            r"ValueError: ParallelismConfig\(pp_size=2, pp_schedule='1F1B'\) needs the model cut into 2",
        ),
        (
            "odd_batch",
            r"ValueError: A batch of 3 rows cannot be cut into ParallelismConfig\(pp_microbatches=2\)",
        ),
        ("no_labels", r"ValueError: A pipeline-parallel model trains inside its schedule"),
    ],
)
def test_misuse_raises_on_every_rank(case: str, expected: str) -> None:
    for message in get_pool(2).run(pw.refusal, case, timeout=120):
        assert re.match(expected, message), message
