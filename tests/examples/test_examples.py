"""The scripts under examples/ run for real through `accelerate launch --cpu --num_processes 2`.

Each test reads its own launch; the launches that depend on no other run start side by side, a few at
a time, ahead of their tests (tests/helpers/side_by_side.py), each with its own folder and port. A
second run that continues from a first one's files starts in its test, once the first has finished.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.commands.helpers import REPO, accelerate_cmd, cli_env, reserved_port, run_cli
from tests.helpers.side_by_side import CommandOf, SideBySide, selected_runs

EXAMPLES = REPO / "examples"


def launch(script: str, *args: str, home: Path) -> subprocess.CompletedProcess[str]:
    """Runs one example on two CPU processes and fails the test with its output if it fails."""
    with reserved_port() as port:
        result = run_cli("launch", "--cpu", "--num_processes", "2", "--main_process_port", str(port),
                         str(EXAMPLES / script), *args, home=home)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def _example(script: str, *args: str) -> CommandOf:
    """The launch of one example with HF_HOME in a case's folder; ``{folder}`` in an argument is that
    folder (for the example's output files)."""

    def command(folder: Path, port: int) -> tuple[list[str], dict[str, str]]:
        cmd = accelerate_cmd("launch", "--cpu", "--num_processes", "2", "--main_process_port", str(port),
                             str(EXAMPLES / script), *(arg.format(folder=folder) for arg in args))  # fmt: skip
        return cmd, cli_env(folder)

    return command


_CHECKPOINT_DIR_ARGS = ("--checkpoint_dir", "{folder}/run", "--checkpoint_every", "10")
_GRADIENT_ACCUMULATION_ARGS = ("--mode", "compare", "--batch_size", "4", "--gradient_accumulation_steps", "4",
                               "--target_batch_size", "16", "--max_fitting_batch", "5")  # fmt: skip
# Each test's first (or only) launch, in the tests' order; an example whose optional package is
# missing is not started (its test skips).
_COMMANDS: dict[str, tuple[str | None, CommandOf]] = {
    "nlp": ("transformers", _example("nlp_example.py")),
    "classifier": (None, _example("train_classifier.py")),
    "classifier_checkpoint_dir": (None, _example("train_classifier.py", *_CHECKPOINT_DIR_ARGS)),
    "checkpointing": (None, _example("checkpointing.py", "--output_dir", "{folder}/full")),
    "gradient_accumulation": (None, _example("gradient_accumulation.py", *_GRADIENT_ACCUMULATION_ARGS)),
    "early_stopping": (None, _example("early_stopping.py")),
    "local_sgd": (None, _example("local_sgd.py", "--local_sgd_steps", "4")),
    "metrics": (None, _example("multi_process_metrics.py", "--eval_samples", "101")),
    # From 32, not the default 128: each retry's gc.collect() costs a fraction of a second per process,
    # and four 10% steps (int(size * 0.9): 28.8 -> 28, 19.8 -> 19, not rounded) show the rule as well.
    "memory": (None, _example("memory.py", "--starting_batch_size", "32", "--max_fitting_batch", "20")),
    "tracking": ("tensorboard", _example("tracking.py", "--project_dir", "{folder}/runs")),
    "profiler": (None, _example("profiler.py", "--trace_dir", "{folder}/traces", "--steps", "3")),
    "schedule_free": ("schedulefree", _example("schedule_free.py")),
}
_CASES_OF_TEST = {
    "test_nlp_example_learns_the_synthetic_task": ["nlp"],
    "test_train_classifier_as_make_demo_runs_it": ["classifier"],
    "test_train_classifier_with_a_checkpoint_dir_continues_from_its_newest_checkpoint": ["classifier_checkpoint_dir"],
    "test_checkpointing_resumes_mid_epoch_to_the_same_weights": ["checkpointing"],
    "test_gradient_accumulation_fixed_and_auto_train_like_the_big_batch": ["gradient_accumulation"],
    "test_early_stopping_stops_every_rank_at_the_same_step": ["early_stopping"],
    "test_local_sgd_models_drift_then_agree_at_each_sync": ["local_sgd"],
    "test_multi_process_metrics_count_each_sample_once": ["metrics"],
    "test_memory_example_shrinks_the_batch_until_it_fits": ["memory"],
    "test_tracking_example_writes_tensorboard_scalars": ["tracking"],
    "test_profiler_example_writes_one_chrome_trace_per_process": ["profiler"],
    "test_schedule_free_example_trains_with_optimizer_train_and_eval": ["schedule_free"],
}  # fmt: skip
# Three 2-process launches at a time, as in tests/commands/test_launch_cli.py: each waits part of its
# time (interpreters starting, the rendezvous), and more than three gain nothing on 2 cores.
_AT_ONCE = 3


@pytest.fixture(scope="module")
def launches(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SideBySide]:
    commands = {
        name: command
        for name, (needs, command) in _COMMANDS.items()
        if needs is None or importlib.util.find_spec(needs) is not None
    }
    with selected_runs(
        request, tmp_path_factory.mktemp("examples"), commands, _CASES_OF_TEST,  # in the tests' order
        at_once=_AT_ONCE, timeout=240, reserve_port=reserved_port,
    ) as runs:  # fmt: skip
        yield runs


def launched(launches: SideBySide, name: str) -> subprocess.CompletedProcess[str]:
    """Case ``name``'s run (see _COMMANDS), failing the test with its output if it failed."""
    result = launches.result(name)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def test_nlp_example_learns_the_synthetic_task(launches: SideBySide) -> None:
    pytest.importorskip("transformers")
    result = launched(launches, "nlp")
    # 130 eval samples: gather_for_metrics drops the padding the sampler added for 2 processes.
    assert "on 130 samples" in result.stdout
    accuracy = float(re.search(r"final accuracy ([\d.]+)", result.stdout).group(1))  # type: ignore[union-attr]
    assert accuracy > 0.9


def test_train_classifier_as_make_demo_runs_it(launches: SideBySide) -> None:
    # `make demo` runs this script with its defaults on two CPU processes.
    result = launched(launches, "classifier")
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


def test_train_classifier_with_a_checkpoint_dir_continues_from_its_newest_checkpoint(
    launches: SideBySide,
) -> None:
    # `make demo-multinode` relies on this: a second start with the same command continues, mid-epoch.
    full = launched(launches, "classifier_checkpoint_dir")
    assert "Continuing at" not in full.stdout
    # 3 epochs of 32 steps per process: the newest checkpoint is step 90, in the last epoch.
    folder = launches.folder("classifier_checkpoint_dir")
    args = (arg.format(folder=folder) for arg in _CHECKPOINT_DIR_ARGS)
    again = launch("train_classifier.py", *args, home=folder)
    assert "Continuing at epoch 2, optimizer step 90" in again.stdout, again.stdout
    epochs = re.findall(r"epoch (\d+): eval accuracy", again.stdout)
    assert epochs == ["2"], again.stdout
    final = [re.search(r"Final accuracy: .*", out.stdout) for out in (full, again)]
    assert final[0] and final[1] and final[0].group(0) == final[1].group(0), (full.stdout, again.stdout)


def checksum(output: str) -> str:
    match = re.search(r"final step (\d+) weight checksum (\S+)", output)
    assert match, output
    return f"{match.group(1)}:{match.group(2)}"


def test_checkpointing_resumes_mid_epoch_to_the_same_weights(launches: SideBySide, tmp_path: Path) -> None:
    full = launched(launches, "checkpointing")
    saved_dir = launches.folder("checkpointing") / "full"
    saved = sorted(p.name for p in saved_dir.iterdir())
    assert saved == ["step_12", "step_16", "step_4", "step_8"]
    # step_4 lies inside the first epoch (8 steps on 2 processes): resume must skip its batches.
    resumed = launch("checkpointing.py", "--output_dir", str(tmp_path / "resumed"),
                     "--resume_from_checkpoint", str(saved_dir / "step_4"), home=tmp_path)  # fmt: skip
    assert "resumed from" in resumed.stdout and "at step 4" in resumed.stdout
    assert checksum(resumed.stdout) == checksum(full.stdout)


def test_gradient_accumulation_fixed_and_auto_train_like_the_big_batch(launches: SideBySide) -> None:
    # One launch trains the three in turn (--mode compare): the big batch, fixed and auto.
    output = launched(launches, "gradient_accumulation").stdout
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


def test_early_stopping_stops_every_rank_at_the_same_step(launches: SideBySide) -> None:
    output = launched(launches, "early_stopping").stdout
    stops = dict(re.findall(r"rank (\d): early stop at step (\d+)", output))
    assert set(stops) == {"0", "1"}, output
    assert len(set(stops.values())) == 1
    assert int(stops["0"]) < 200
    # The step where it stops is the first step where some rank's own loss crossed the threshold.
    first_trigger = min(int(s) for s in re.findall(r"below threshold at step (\d+)", output))
    assert int(stops["0"]) == first_trigger


def test_local_sgd_models_drift_then_agree_at_each_sync(launches: SideBySide) -> None:
    output = launched(launches, "local_sgd").stdout  # --local_sgd_steps 4
    spread = {
        int(step): float(value)
        for step, value in re.findall(r"step (\d+): spread across processes (\S+)", output)
    }
    assert sorted(spread) == list(range(1, 9)), output
    assert all(spread[step] > 0 for step in (1, 2, 3, 5, 6, 7))  # no gradient all-reduce between syncs
    assert spread[4] == spread[8] == 0.0
    # 30 steps is not a multiple of 4: leaving the block averages once more.
    assert "final spread across processes 0.00e+00" in output


def test_multi_process_metrics_count_each_sample_once(launches: SideBySide) -> None:
    output = launched(launches, "metrics").stdout  # --eval_samples 101
    distributed = re.search(r"distributed accuracy (\S+) over (\d+) samples, (\d+) records", output)
    single = re.search(r"single-process accuracy (\S+) over (\d+) samples", output)
    assert distributed and single, output
    assert distributed.group(2) == distributed.group(3) == single.group(2) == "101"
    assert distributed.group(1) == single.group(1)


def test_memory_example_shrinks_the_batch_until_it_fits(launches: SideBySide) -> None:
    output = launched(launches, "memory").stdout  # --starting_batch_size 32 --max_fitting_batch 20
    assert re.findall(r"trying batch size (\d+)", output) == ["32", "28", "25", "22", "19"]
    assert "trained with batch size 19" in output


def test_tracking_example_writes_tensorboard_scalars(launches: SideBySide) -> None:
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    output = launched(launches, "tracking").stdout
    assert "logged 16 steps" in output
    run = launches.folder("tracking") / "runs" / "tracking_example"
    events = event_accumulator.EventAccumulator(str(run))
    events.Reload()
    losses = events.Scalars("train/loss")
    assert [e.step for e in losses] == list(range(1, 17))  # main process only: one value per step
    assert [e.step for e in events.Scalars("train/epoch_loss")] == [8, 16]


def test_profiler_example_writes_one_chrome_trace_per_process(launches: SideBySide) -> None:
    output = launched(launches, "profiler").stdout
    assert "Self CPU time total" in output  # the main process's summary table
    for rank in (0, 1):
        trace = json.loads((launches.folder("profiler") / "traces" / f"profile_{rank}.json").read_text())
        names = {event.get("name") for event in trace["traceEvents"]}
        assert "aten::addmm" in names  # the Linear layers' forward ran inside the block


def test_schedule_free_example_trains_with_optimizer_train_and_eval(launches: SideBySide) -> None:
    pytest.importorskip("schedulefree")
    output = launched(launches, "schedule_free").stdout
    assert "on 150 samples" in output
    accuracy = float(re.search(r"final accuracy ([\d.]+)", output).group(1))  # type: ignore[union-attr]
    assert accuracy > 0.9
