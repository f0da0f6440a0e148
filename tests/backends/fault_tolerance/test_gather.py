"""gather_for_metrics inside a replica group of 2 processes: an evaluation pass (every prepared model
in eval mode) covers the whole dataset in each group, split over the group's processes as a plain run
splits it; the gather spans the group's processes only and drops the padding of the last round."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torchft")

from accelerate.backends.fault_tolerance.manager import lighthouse_address, start_lighthouse  # noqa: E402
from tests.backends.fault_tolerance.launched import run_groups  # noqa: E402


@pytest.mark.timeout(240)
def test_gather_for_metrics_spans_the_group_and_trims_the_last_round(tmp_path: Path) -> None:
    server = start_lighthouse("127.0.0.1:0", min_replicas=2)
    lighthouse = lighthouse_address(server, "127.0.0.1")
    run_groups(
        [
            ["--num_processes", "2", "-m", "tests.backends.fault_tolerance.resume_worker", str(tmp_path), "gather", lighthouse, str(group)]
            for group in (0, 1)
        ],
        server=server,
        timeout=200,
    )  # fmt: skip
    for group in (0, 1):
        runs = [json.loads((tmp_path / f"gather_{group}_{rank}.json").read_text()) for rank in (0, 1)]
        # 30 samples, batches of 4 per process: 4 rounds of 8, the last padded with 2 samples and trimmed
        assert runs[0]["gathered"] == runs[1]["gathered"]
        assert [len(step) for step in runs[0]["gathered"]] == [8, 8, 8, 6]
        assert sorted(i for step in runs[0]["gathered"] for i in step) == list(range(30))
