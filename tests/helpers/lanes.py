"""``make test``: the suite in two pytest sessions at once, one per lane.

Most of the suite's time goes to tests that start processes (launches, process pools), and the
cores are idle for part of it (process start-up, rendezvous, deliberate waits); the tests that run
in the test process only (thousands, two minutes or so in all) would use that idle time. So
``make test`` runs two pytest sessions side by side:

- the **process lane**: every test file not listed below, as one session, in the usual order, at
  normal priority;
- the **in-process lane**: the files listed in :data:`IN_PROCESS`, whose tests start no process and
  measure no time, in a session of its own at the lowest CPU priority (nice 19): it runs when the
  process lane leaves a core idle, so the launches' timing is what it would be alone.

A test in the in-process lane that starts a busy process, or a process pool, fails with a message
saying to move its file (:func:`check_in_process`, and the pools refuse to start there), so the
list cannot go stale silently; a file not listed runs in the process lane. ``pytest tests`` still
runs everything in one session.

Usage: ``python -m tests.helpers.lanes [pytest options...]`` from the repository root; the options
go to both sessions. The process lane prints as it runs; the in-process lane's output follows it.
The exit status is the process lane's, or the in-process lane's when that one failed alone.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# The environment variable the in-process lane's session runs with (read by check_in_process).
LANE_VARIABLE = "ACCELERATE_TEST_LANE"
IN_PROCESS_LANE = "in-process"

# Test files (or folders) whose tests start no process, use no process pool and time nothing (no
# sleeps, threads or deadlines: at nice 19 they may wait for a core), from a run of the whole suite
# that recorded each test's reaped children's CPU time (2026-11-30). A test here that starts a busy
# process fails (see check_in_process): move its file out of this list.
IN_PROCESS: tuple[str, ...] = (
    "tests/config",
    "tests/backends/deepspeed/test_deepspeed_config.py",
    "tests/backends/deepspeed/test_deepspeed_plugin_launch.py",
    "tests/backends/fault_tolerance/test_loader.py",
    "tests/backends/fault_tolerance/test_strategy.py",
    "tests/backends/fault_tolerance/test_wire.py",
    "tests/backends/fsdp/test_fsdp_api.py",
    "tests/backends/fsdp/test_fsdp_plugin.py",
    "tests/backends/parallel/test_pipeline_stage.py",
    "tests/backends/parallel/test_sequence.py",
    "tests/backends/pipeline/test_inputs.py",
    "tests/backends/pipeline/test_split.py",
    "tests/backends/test_prepare_context.py",
    "tests/backends/test_registry.py",
    "tests/backends/test_resolve.py",
    "tests/backends/test_xla.py",
    "tests/bench/test_elastic.py",
    "tests/bench/test_guarded.py",
    "tests/bench/test_plot.py",
    "tests/big_modeling/test_big_modeling.py",
    "tests/big_modeling/test_bnb.py",
    "tests/big_modeling/test_bnb_offload.py",
    "tests/big_modeling/test_bnb_training.py",
    "tests/big_modeling/test_device_map.py",
    "tests/big_modeling/test_device_map_options.py",
    "tests/big_modeling/test_hooks.py",
    "tests/big_modeling/test_loading.py",
    "tests/big_modeling/test_offload.py",
    "tests/big_modeling/test_planner.py",
    "tests/big_modeling/test_sizes.py",
    "tests/big_modeling/test_tensors.py",
    "tests/big_modeling/test_upstream_surface.py",
    "tests/checkpointing/test_load_options.py",
    "tests/checkpointing/test_membership.py",
    "tests/checkpointing/test_sizes_objects.py",
    "tests/checkpointing/test_world_size_refusals.py",
    "tests/clients/test_diffusers.py",
    "tests/clients/test_diffusers_patterns.py",
    "tests/clients/test_trl.py",
    "tests/commands/test_config_args.py",
    "tests/commands/test_config_backends.py",
    "tests/commands/test_console_scripts.py",
    "tests/commands/test_env.py",
    "tests/commands/test_estimate.py",
    "tests/commands/test_estimate_memory_cli.py",
    "tests/commands/test_estimate_run.py",
    "tests/commands/test_launch_check_plan.py",
    "tests/commands/test_launch_helpers.py",
    "tests/commands/test_launch_inprocess.py",
    "tests/commands/test_tpu_config.py",
    "tests/data/test_adapter.py",
    "tests/data/test_dispatcher.py",
    "tests/data/test_resume.py",
    "tests/data/test_sharding.py",
    "tests/docs/test_readme_sync.py",
    "tests/docs/test_site.py",
    "tests/launch/test_cluster.py",
    "tests/launch/test_cluster_scale.py",
    "tests/launch/test_elastic_flags.py",
    "tests/launch/test_elastic_scale.py",
    "tests/launch/test_expert_flags.py",
    "tests/launch/test_fp8.py",
    "tests/launch/test_hang_report.py",
    "tests/launch/test_hostlist.py",
    "tests/launch/test_parallelism.py",
    "tests/launch/test_pipeline_flags.py",
    "tests/launch/test_plan.py",
    "tests/launch/test_restarts.py",
    "tests/planning/test_allocations.py",
    "tests/planning/test_check.py",
    "tests/planning/test_checkpoint_plan.py",
    "tests/planning/test_estimate.py",
    "tests/planning/test_experts.py",
    "tests/planning/test_shapes.py",
    "tests/planning/test_stages.py",
    "tests/planning/test_validation.py",
    "tests/precision/fp8/test_ao.py",
    "tests/precision/fp8/test_resolve.py",
    "tests/precision/test_amp.py",
    "tests/precision/test_helpers.py",
    "tests/state/test_elastic_accumulation.py",
    "tests/state/test_environment.py",
    "tests/state/test_gradient.py",
    "tests/state/test_parallelism_env.py",
    "tests/state/test_pipeline_options.py",
    "tests/state/test_run.py",
    "tests/storage/test_atomic.py",
    "tests/storage/test_entry_names.py",
    "tests/storage/test_host_staging.py",
    "tests/storage/test_mapped_reads.py",
    "tests/storage/test_model_files.py",
    "tests/storage/test_safetensors_io.py",
    "tests/storage/test_state_tree.py",
    "tests/test_accelerator_runtime.py",
    "tests/test_launchers.py",
    "tests/test_optimizer.py",
    "tests/test_preparation.py",
    "tests/test_reference_present.py",
    "tests/test_source_of_truth.py",
    "tests/test_trainer_reference_api.py",
    "tests/test_upstream_api_faces.py",
    "tests/test_upstream_differences.py",
    "tests/test_utils/test_cases.py",
    "tests/test_utils/test_devices.py",
    "tests/test_utils/test_examples.py",
    "tests/test_utils/test_import.py",
    "tests/test_utils/test_reference_api.py",
    "tests/test_version.py",
    "tests/tracking/test_base.py",
    "tests/tracking/test_cometml.py",
    "tests/tracking/test_dvclive.py",
    "tests/tracking/test_logger_type.py",
    "tests/tracking/test_mlflow.py",
    "tests/tracking/test_tensorboard.py",
    "tests/tracking/test_trackers.py",
    "tests/tracking/test_trackio.py",
    "tests/tracking/test_wandb.py",
    "tests/utils/test_constants.py",
    "tests/utils/test_dataclasses.py",
    "tests/utils/test_environment.py",
    "tests/utils/test_hardware_dataclasses.py",
    "tests/utils/test_hardware_only.py",
    "tests/utils/test_imports.py",
    "tests/utils/test_lomo.py",
    "tests/utils/test_ports.py",
    "tests/utils/test_records.py",
    "tests/utils/test_reference_api.py",
    "tests/utils/test_versions.py",
    "tests/utils/test_xla_absent.py",
)

# A test in the in-process lane may start a short helper process (a `python -c` that checks an
# import, say) but not a launch: this many CPU seconds of reaped children per test, at most.
CHILD_CPU_LIMIT_S = 1.0


def missing(paths: Sequence[str] = IN_PROCESS, root: Path = ROOT) -> list[str]:
    """The entries of ``paths`` that are not in the checkout (renamed or removed test files)."""
    return [path for path in paths if not (root / path).exists()]


def commands(options: Sequence[str], paths: Sequence[str] = IN_PROCESS) -> tuple[list[str], list[str]]:
    """The process lane's and the in-process lane's pytest command lines (run from the checkout's root)."""
    pytest = [sys.executable, "-m", "pytest"]
    process_lane = [*pytest, *options, "tests", *(f"--ignore={path}" for path in paths)]
    # The in-process lane keeps no cache: two sessions writing .pytest_cache at once would each
    # overwrite the other's last-failed list.
    in_process_lane = [*pytest, *options, "-p", "no:cacheprovider", *paths]
    return process_lane, in_process_lane


def combined_status(process_lane: int, in_process_lane: int) -> int:
    """One exit status for the two sessions: the first lane's failure, else success."""
    return process_lane if process_lane != 0 else in_process_lane


def children_cpu_seconds() -> float:
    """CPU seconds of this process's reaped children (and theirs), so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def check_in_process(nodeid: str, child_cpu_s: float) -> str | None:
    """The failure message for a test of the in-process lane whose children used ``child_cpu_s``, if any."""
    if child_cpu_s <= CHILD_CPU_LIMIT_S:
        return None
    file = nodeid.split("::", 1)[0]
    return (
        f"{nodeid} ran {child_cpu_s:.1f} CPU seconds in child processes, but its file is in the "
        f"in-process lane of `make test` (tests/helpers/lanes.py, IN_PROCESS), which runs beside the "
        f"launches: remove {file!r} (or its folder) from IN_PROCESS so that it runs in the process lane."
    )


def in_process_lane() -> bool:
    """Whether this session is the in-process lane of ``make test``."""
    return os.environ.get(LANE_VARIABLE) == IN_PROCESS_LANE


@pytest.fixture(autouse=True)
def _starts_no_process(request: pytest.FixtureRequest) -> Iterator[None]:
    """In the in-process lane: fails a test whose child processes used more than CHILD_CPU_LIMIT_S."""
    if not in_process_lane():
        yield
        return
    before = children_cpu_seconds()
    yield
    message = check_in_process(request.node.nodeid, children_cpu_seconds() - before)
    if message is not None:
        pytest.fail(message, pytrace=False)


def _lowest_priority() -> None:
    # In the child, before pytest starts: the in-process lane takes only the CPU the other leaves.
    os.nice(19)


def run(options: Sequence[str], paths: Sequence[str] = IN_PROCESS, root: Path = ROOT) -> int:
    """Runs both lanes at once from ``root`` (the checkout); returns the combined exit status."""
    stale = missing(paths, root)
    if stale:
        print(f"tests/helpers/lanes.py: IN_PROCESS names paths that do not exist: {stale}", file=sys.stderr)
        return 4
    process_cmd, in_process_cmd = commands(options, paths)
    if not paths:
        return subprocess.call(process_cmd, cwd=root)
    env = {**os.environ, LANE_VARIABLE: IN_PROCESS_LANE}
    with tempfile.TemporaryFile("w+", encoding="utf-8") as log:
        in_process = subprocess.Popen(
            in_process_cmd,
            cwd=root,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=_lowest_priority,
        )
        try:
            process_status = subprocess.call(process_cmd, cwd=root)
        finally:
            in_process_status = in_process.wait()
        log.seek(0)
        print(f"\n---- in-process lane ({len(paths)} paths, run beside the tests above) ----", flush=True)
        sys.stdout.write(log.read())
        sys.stdout.flush()
    return combined_status(process_status, in_process_status)


def main(argv: Sequence[str] | None = None) -> int:
    return run(list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
