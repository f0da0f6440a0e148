"""The scripts under examples/ run for real through `accelerate launch --cpu --num_processes 2`."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.commands.helpers import REPO, reserved_port, run_cli

EXAMPLES = REPO / "examples"


def launch(script: str, *args: str, home: Path) -> subprocess.CompletedProcess[str]:
    """Runs one example on two CPU processes and fails the test with its output if it fails."""
    with reserved_port() as port:
        result = run_cli("launch", "--cpu", "--num_processes", "2", "--main_process_port", str(port),
                         str(EXAMPLES / script), *args, home=home)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def test_nlp_example_learns_the_synthetic_task(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    result = launch("nlp_example.py", home=tmp_path)
    # 130 eval samples: gather_for_metrics drops the padding the sampler added for 2 processes.
    assert "on 130 samples" in result.stdout
    accuracy = float(re.search(r"final accuracy ([\d.]+)", result.stdout).group(1))  # type: ignore[union-attr]
    assert accuracy > 0.9


def test_train_classifier_as_make_demo_runs_it(tmp_path: Path) -> None:
    # `make demo` runs this script with its defaults on two CPU processes.
    result = launch("train_classifier.py", home=tmp_path)
    assert "Training on 2 process(es), device cpu, mixed precision no" in result.stdout
    # 500 eval samples in batches of 64 on 2 processes: the sampler pads, gather_for_metrics drops the
    # padding, so every epoch counts each sample exactly once.
    epochs = re.findall(r"epoch (\d+): eval accuracy ([\d.]+) on (\d+) samples", result.stdout)
    assert [(epoch, total) for epoch, _, total in epochs] == [("0", "500"), ("1", "500"), ("2", "500")]
    final = re.search(r"Final accuracy: ([\d.]+) \((\d+)/500\)", result.stdout)
    assert final, result.stdout
    assert float(final.group(1)) == float(epochs[-1][1]) > 0.85  # chance is 0.25
    # Written to a pipe, each progress line that shows a loss shows the batches done with it (the bar
    # once printed a stale 0/32 beside every new loss).
    counts = [int(n) for n in re.findall(r"(\d+)/32 \[[^\]]*loss=", result.stderr)]
    assert counts and min(counts) > 0, result.stderr[-2000:]


def test_train_classifier_with_a_checkpoint_dir_continues_from_its_newest_checkpoint(tmp_path: Path) -> None:
    # `make demo-multinode` relies on this: a second start with the same command continues, mid-epoch.
    args = ("--checkpoint_dir", str(tmp_path / "run"), "--checkpoint_every", "10")
    full = launch("train_classifier.py", *args, home=tmp_path)
    assert "Continuing at" not in full.stdout
    # 3 epochs of 32 steps per process: the newest checkpoint is step 90, in the last epoch.
    again = launch("train_classifier.py", *args, home=tmp_path)
    assert "Continuing at epoch 2, optimizer step 90" in again.stdout, again.stdout
    epochs = re.findall(r"epoch (\d+): eval accuracy", again.stdout)
    assert epochs == ["2"], again.stdout
    final = [re.search(r"Final accuracy: .*", out.stdout) for out in (full, again)]
    assert final[0] and final[1] and final[0].group(0) == final[1].group(0), (full.stdout, again.stdout)


def checksum(output: str) -> str:
    match = re.search(r"final step (\d+) weight checksum (\S+)", output)
    assert match, output
    return f"{match.group(1)}:{match.group(2)}"


def test_checkpointing_resumes_mid_epoch_to_the_same_weights(tmp_path: Path) -> None:
    full = launch("checkpointing.py", "--output_dir", str(tmp_path / "full"), home=tmp_path)
    saved = sorted(p.name for p in (tmp_path / "full").iterdir())
    assert saved == ["step_12", "step_16", "step_4", "step_8"]
    # step_4 lies inside the first epoch (8 steps on 2 processes): resume must skip its batches.
    resumed = launch("checkpointing.py", "--output_dir", str(tmp_path / "resumed"),
                     "--resume_from_checkpoint", str(tmp_path / "full" / "step_4"), home=tmp_path)  # fmt: skip
    assert "resumed from" in resumed.stdout and "at step 4" in resumed.stdout
    assert checksum(resumed.stdout) == checksum(full.stdout)


def test_gradient_accumulation_fixed_and_auto_train_like_the_big_batch(tmp_path: Path) -> None:
    # One launch trains the three in turn (--mode compare): the big batch, fixed and auto.
    output = launch("gradient_accumulation.py", "--mode", "compare", "--batch_size", "4",
                    "--gradient_accumulation_steps", "4", "--target_batch_size", "16",
                    "--max_fitting_batch", "5", home=tmp_path).stdout  # fmt: skip
    runs = re.findall(
        r"micro-batch (\d+ x \d+) accumulation steps: (\d+) optimizer steps, .* checksum (\S+)", output
    )
    assert len(runs) == 3, output
    big, fixed, auto = ((f"{shape} -> {steps} steps", float(checksum)) for shape, steps, checksum in runs)
    assert big[0] == "16 x 1 -> 16 steps"
    # auto: 16 samples per step wanted, at most 5 fit -> find_executable_batch_size settles on 4.
    assert fixed[0] == auto[0] == "4 x 4 -> 16 steps"
    assert fixed[1] == pytest.approx(big[1], abs=1e-6)
    assert auto[1] == pytest.approx(big[1], abs=1e-6)


def test_early_stopping_stops_every_rank_at_the_same_step(tmp_path: Path) -> None:
    output = launch("early_stopping.py", home=tmp_path).stdout
    stops = dict(re.findall(r"rank (\d): early stop at step (\d+)", output))
    assert set(stops) == {"0", "1"}, output
    assert len(set(stops.values())) == 1
    assert int(stops["0"]) < 200
    # The step where it stops is the first step where some rank's own loss crossed the threshold.
    first_trigger = min(int(s) for s in re.findall(r"below threshold at step (\d+)", output))
    assert int(stops["0"]) == first_trigger


def test_local_sgd_models_drift_then_agree_at_each_sync(tmp_path: Path) -> None:
    output = launch("local_sgd.py", "--local_sgd_steps", "4", home=tmp_path).stdout
    spread = {
        int(step): float(value)
        for step, value in re.findall(r"step (\d+): spread across processes (\S+)", output)
    }
    assert sorted(spread) == list(range(1, 9)), output
    assert all(spread[step] > 0 for step in (1, 2, 3, 5, 6, 7))  # no gradient all-reduce between syncs
    assert spread[4] == spread[8] == 0.0
    # 30 steps is not a multiple of 4: leaving the block averages once more.
    assert "final spread across processes 0.00e+00" in output


def test_multi_process_metrics_count_each_sample_once(tmp_path: Path) -> None:
    output = launch("multi_process_metrics.py", "--eval_samples", "101", home=tmp_path).stdout
    distributed = re.search(r"distributed accuracy (\S+) over (\d+) samples, (\d+) records", output)
    single = re.search(r"single-process accuracy (\S+) over (\d+) samples", output)
    assert distributed and single, output
    assert distributed.group(2) == distributed.group(3) == single.group(2) == "101"
    assert distributed.group(1) == single.group(1)


def test_memory_example_shrinks_the_batch_until_it_fits(tmp_path: Path) -> None:
    # From 32, not the default 128: each retry's gc.collect() costs a fraction of a second per process,
    # and four 10% steps (int(size * 0.9): 28.8 -> 28, 19.8 -> 19, not rounded) show the rule as well.
    output = launch(
        "memory.py", "--starting_batch_size", "32", "--max_fitting_batch", "20", home=tmp_path
    ).stdout
    assert re.findall(r"trying batch size (\d+)", output) == ["32", "28", "25", "22", "19"]
    assert "trained with batch size 19" in output


def test_tracking_example_writes_tensorboard_scalars(tmp_path: Path) -> None:
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    output = launch("tracking.py", "--project_dir", str(tmp_path / "runs"), home=tmp_path).stdout
    assert "logged 16 steps" in output
    run = tmp_path / "runs" / "tracking_example"
    events = event_accumulator.EventAccumulator(str(run))
    events.Reload()
    losses = events.Scalars("train/loss")
    assert [e.step for e in losses] == list(range(1, 17))  # main process only: one value per step
    assert [e.step for e in events.Scalars("train/epoch_loss")] == [8, 16]


def test_profiler_example_writes_one_chrome_trace_per_process(tmp_path: Path) -> None:
    output = launch(
        "profiler.py", "--trace_dir", str(tmp_path / "traces"), "--steps", "3", home=tmp_path
    ).stdout
    assert "Self CPU time total" in output  # the main process's summary table
    for rank in (0, 1):
        trace = json.loads((tmp_path / "traces" / f"profile_{rank}.json").read_text())
        names = {event.get("name") for event in trace["traceEvents"]}
        assert "aten::addmm" in names  # the Linear layers' forward ran inside the block


def test_schedule_free_example_trains_with_optimizer_train_and_eval(tmp_path: Path) -> None:
    pytest.importorskip("schedulefree")
    output = launch("schedule_free.py", home=tmp_path).stdout
    assert "on 150 samples" in output
    accuracy = float(re.search(r"final accuracy ([\d.]+)", output).group(1))  # type: ignore[union-attr]
    assert accuracy > 0.9
