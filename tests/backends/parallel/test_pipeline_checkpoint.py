"""save_state under pp=2: every rank writes its own stages; the folder resumes under pp=2 exactly and
loads the whole model in one process."""

from __future__ import annotations

from pathlib import Path

import torch

from tests.backends.parallel import pipeline_workers as pw
from tests.conftest import get_pool


def test_pp2_checkpoint_resumes_under_pp2_and_loads_in_one_process(tmp_path: Path) -> None:
    folder = str(tmp_path / "ckpt")
    sizes = {"pp_size": 2, "pp_schedule": "1F1B"}
    run = get_pool(2).run(pw.train_save_continue, sizes, folder, timeout=300)[0]
    straight = run["end"]
    resumed = get_pool(2).run(pw.resume_continue, sizes, folder, timeout=300)
    for result in resumed:
        assert set(result) == set(straight)
        for key, value in straight.items():
            torch.testing.assert_close(result[key], value, rtol=0, atol=0, msg=key)  # exact resume
    saved = get_pool(2).run(pw.resume_continue, {}, folder, timeout=300)[0]  # no pipeline: whole model
    assert set(saved) == set(straight)
    for key, value in run["at_save"].items():
        torch.testing.assert_close(saved[key], value, rtol=0, atol=0, msg=key)
