"""`accelerate launch` end to end: real processes, failures, multi-machine, dry run, help without torch."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.commands.helpers import SCRIPTS, accelerate_cmd, cli_env, reserved_port, run_cli
from tests.helpers.side_by_side import SideBySide, selected_runs

TRAIN = str(SCRIPTS / "train_regression.py")
LAUNCH_2 = ("launch", "--cpu", "--num_processes", "2")


def _train(folder: Path, port: int) -> tuple[list[str], dict[str, str]]:
    cmd = accelerate_cmd(*LAUNCH_2, "--main_process_port", str(port), TRAIN, str(folder / "params.json"))
    return cmd, cli_env(folder)


def _own_temp_dir(folder: Path) -> dict[str, str]:
    """TMPDIR for a launch, so that a test sees the ``torchelastic_*`` folder torch's agent makes there."""
    (folder / "tmp").mkdir()
    return {"TMPDIR": str(folder / "tmp")}


def _torchelastic_folders(folder: Path) -> list[str]:
    return sorted(p.name for p in (folder / "tmp").iterdir() if p.name.startswith("torchelastic_"))


def _train_failing_on_rank_one(folder: Path, port: int) -> tuple[list[str], dict[str, str]]:
    cmd = accelerate_cmd(*LAUNCH_2, "--main_process_port", str(port), TRAIN, str(folder / "x.json"), "1")
    return cmd, cli_env(folder, **_own_temp_dir(folder))


# The launch whose rank raises keeps its logs in a folder of the user's (--log_dir), which must stay.
_LOG_DIR_OF = {"raise": "worker_logs"}


def _rank_one_dies(how: str) -> Callable[[Path, int], tuple[list[str], dict[str, str]]]:
    def command(folder: Path, port: int) -> tuple[list[str], dict[str, str]]:
        script = folder / "die.py"
        script.write_text(_DIE_ON_RANK_ONE)
        log_dir = ["--log_dir", str(folder / _LOG_DIR_OF[how])] if how in _LOG_DIR_OF else []
        cmd = accelerate_cmd(*LAUNCH_2, "--main_process_port", str(port), *log_dir, str(script), how)
        return cmd, cli_env(folder, **_own_temp_dir(folder))

    return command


def _gpu_config_without_gpus(folder: Path, port: int) -> tuple[list[str], dict[str, str]]:
    config = folder / "gpu_config.yaml"
    config.write_text(_GPU_CONFIG)
    script = folder / "where.py"
    script.write_text(
        # wait_for_everyone: a rank that exits while its peer still connects would fail the peer.
        "from accelerate import PartialState\ns = PartialState()\ns.wait_for_everyone()\n"
        "import sys\nsys.stdout.write(f'RAN {s.process_index} {s.num_processes} {s.device.type} {s.backend}\\n')\n"
    )
    cmd = accelerate_cmd(
        "launch", "--config_file", str(config), "--main_process_port", str(port), str(script)
    )
    return cmd, cli_env(folder, CUDA_VISIBLE_DEVICES="")


def _parallelism(sizes: tuple[str, str]) -> Callable[[Path, int], tuple[list[str], dict[str, str]]]:
    def command(folder: Path, port: int) -> tuple[list[str], dict[str, str]]:
        (folder / "out").mkdir()
        cmd = accelerate_cmd(*LAUNCH_2, "--main_process_port", str(port), "--use_parallelism_config", *sizes,
                             str(SCRIPTS / "report_parallelism.py"), str(folder / "out"))  # fmt: skip
        return cmd, cli_env(folder)

    return command


_HOW_RANK_ONE_DIES = ("os_exit", "sigkill", "raise")
_PARALLELISM_SIZES = (
    ("--parallelism_config_tp_size", "2"),
    ("--parallelism_config_dp_replicate_size", "2"),
    ("--parallelism_config_sp_size", "2"),  # the native Ulysses: no DeepSpeed
)
# The 2-process launches whose tests only read their results, in the tests' order. Each is a different
# script or flag; they run side by side, a few at a time (tests/helpers/side_by_side.py).
_CASES_OF_TEST = {
    "test_two_cpu_processes_see_world_size_two": ["train"],
    "test_two_machines_train_like_one": ["train"],
    "test_failing_rank_shows_its_traceback_and_the_other_stops": ["failing"],
    "test_the_rank_that_died_first_is_named_even_without_a_traceback": [f"dies-{how}" for how in _HOW_RANK_ONE_DIES],
    "test_a_multi_gpu_config_on_a_machine_without_gpus_warns_once_and_runs_on_cpu": ["gpu_config"],
    "test_two_processes_get_the_launchers_parallelism_config": [f"parallelism-{sizes[0]}" for sizes in _PARALLELISM_SIZES],
}  # fmt: skip
# Three 2-process launches at a time: about as fast as more on 2 cores, and far less memory.
_AT_ONCE = 3


@pytest.fixture(scope="module")
def launches(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SideBySide]:
    commands = {
        "train": _train,
        "failing": _train_failing_on_rank_one,
        **{f"dies-{how}": _rank_one_dies(how) for how in _HOW_RANK_ONE_DIES},
        "gpu_config": _gpu_config_without_gpus,
        **{f"parallelism-{sizes[0]}": _parallelism(sizes) for sizes in _PARALLELISM_SIZES},
    }
    with selected_runs(
        request, tmp_path_factory.mktemp("launches"), commands, _CASES_OF_TEST,  # in the tests' order
        at_once=_AT_ONCE, timeout=240, reserve_port=reserved_port,
    ) as runs:  # fmt: skip
        yield runs


@pytest.fixture(scope="module")
def two_process_run(launches: SideBySide) -> tuple[subprocess.CompletedProcess[str], dict]:
    """One `accelerate launch --cpu --num_processes 2` run, shared by the tests that inspect it."""
    result = launches.result("train")
    assert result.returncode == 0, result.stdout + result.stderr
    return result, json.loads((launches.folder("train") / "params.json").read_text())


def test_two_cpu_processes_see_world_size_two(
    two_process_run: tuple[subprocess.CompletedProcess[str], dict],
) -> None:
    result, params = two_process_run
    assert "world_size=2 rank=0 env_world=2 backend=gloo" in result.stdout
    assert "world_size=2 rank=1 env_world=2 backend=gloo" in result.stdout
    assert params["world_size"] == 2
    # No config file in the fresh HF_HOME: the launcher says so.
    assert "no config file" in result.stderr


def test_two_machines_train_like_one(
    tmp_path: Path, two_process_run: tuple[subprocess.CompletedProcess[str], dict]
) -> None:
    out = tmp_path / "params.json"
    # The port is held for machine 0's launcher from before either launcher starts until both have
    # finished (reserved_port), so no other process on this host can take it in between.
    with reserved_port() as port:
        common = ["launch", "--cpu", "--num_processes", "2", "--num_machines", "2", "--main_process_ip",
                  "127.0.0.1", "--main_process_port", str(port)]  # fmt: skip
        procs = [
            subprocess.Popen(accelerate_cmd(*common, "--machine_rank", str(rank), TRAIN, str(out)),
                             env=cli_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for rank in (0, 1)
        ]  # fmt: skip
        try:
            outputs = [p.communicate(timeout=120)[0] for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    print(f"machine launcher {procs.index(p)} hung; its output:\n{p.communicate()[0]}")
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert "world_size=2 rank=1" in outputs[1]
    result = json.loads(out.read_text())
    assert result["world_size"] == 2
    assert result["params"] == pytest.approx(two_process_run[1]["params"], abs=1e-6)


def test_failing_rank_shows_its_traceback_and_the_other_stops(launches: SideBySide) -> None:
    result = launches.result("failing")
    assert result.returncode == 1
    report = result.stderr[result.stderr.index("accelerate launch: rank 1") :]
    assert "failed with exit code 1" in report.splitlines()[0]
    assert 'train_regression.py", line' in report and "ValueError: deliberate failure on rank 1" in report
    assert "bootstrap.py" not in report  # the launcher's own frames are trimmed
    # The log folder torch's agent made in the temp dir held only the error files the report above
    # was read from: the launcher removed it (they used to pile up, one per failed launch).
    assert _torchelastic_folders(launches.folder("failing")) == []


def test_single_process_failure_exit_code(tmp_path: Path) -> None:
    script = tmp_path / "boom.py"
    script.write_text("import sys\nprint(sys.argv[1:])\nraise SystemExit(3)\n")
    result = run_cli("launch", str(script), "--flag", "x", home=tmp_path)
    assert result.returncode == 3
    assert "['--flag', 'x']" in result.stdout
    assert "exit code 3" in result.stderr


@pytest.mark.parametrize(
    ("body", "code", "said"),
    [
        (
            "os.kill(os.getpid(), signal.SIGKILL)",
            128 + 9,
            "signal SIGKILL (a signal ended it: no Python traceback)",
        ),
        ("os._exit(5)", 5, "exit code 5 (its traceback, if it printed one, is above)"),
    ],
)
def test_single_process_ended_without_a_traceback(tmp_path: Path, body: str, code: int, said: str) -> None:
    script = tmp_path / "dies.py"
    script.write_text(f"import os, signal\n{body}\n")
    result = run_cli("launch", "--cpu", str(script), home=tmp_path)
    assert result.returncode == code
    assert result.stderr.splitlines()[-1] == f"accelerate launch: the process exited with {said}.", (
        result.stderr
    )


def test_default_config_file_is_announced(tmp_path: Path) -> None:
    (tmp_path / "accelerate").mkdir()
    (tmp_path / "accelerate" / "default_config.yaml").write_text("num_processes: 1\nmixed_precision: bf16\n")
    script = tmp_path / "show.py"
    script.write_text("import os\nprint(os.environ['ACCELERATE_MIXED_PRECISION'])\n")
    result = run_cli("launch", str(script), home=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "bf16"
    assert f"using the default config file {tmp_path / 'accelerate' / 'default_config.yaml'}" in result.stderr


def test_module_launch(tmp_path: Path) -> None:
    (tmp_path / "mymod.py").write_text("import sys\nprint('module', __name__, sys.argv[1:])\n")
    result = subprocess.run(accelerate_cmd("launch", "-m", "mymod", "a"), env=cli_env(tmp_path), cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "module __main__ ['a']" in result.stdout


@pytest.mark.parametrize("args", [["--help"], ["launch", "--help"], ["config", "--help"], ["test", "--help"]])
def test_help_does_not_import_torch(args: list[str]) -> None:
    code = (
        "import sys\nfrom accelerate.commands.accelerate_cli import main\n"
        f"try:\n    main({args!r})\nexcept SystemExit:\n    pass\n"
        "print('TORCH_IMPORTED' if 'torch' in sys.modules else 'NO_TORCH')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "usage: accelerate" in result.stdout
    assert result.stdout.strip().endswith("NO_TORCH")


def test_sigterm_to_a_single_process_launch_reaches_the_child(tmp_path: Path) -> None:
    """scancel / docker stop send SIGTERM to the launcher: the training process must not linger."""
    import signal
    import subprocess
    import time

    from tests.commands.helpers import accelerate_cmd, cli_env

    script = tmp_path / "sleeper.py"
    pid_file = tmp_path / "child.pid"
    script.write_text(
        f"import os, sys, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(120)\n"
    )
    launcher = subprocess.Popen(accelerate_cmd("launch", str(script)), env=cli_env(tmp_path))
    try:
        deadline = time.monotonic() + 60
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline and launcher.poll() is None, "the child never started"
            time.sleep(0.1)
        child = int(pid_file.read_text())
        launcher.send_signal(signal.SIGTERM)
        launcher.wait(timeout=30)
        deadline = time.monotonic() + 10
        while True:
            try:
                os.kill(child, 0)
            except ProcessLookupError:
                break
            assert time.monotonic() < deadline, f"child {child} still runs after the launcher got SIGTERM"
            time.sleep(0.1)
    finally:
        if launcher.poll() is None:
            launcher.kill()


def test_launch_flags_reach_the_accelerator_in_the_child(tmp_path: Path) -> None:
    from tests.commands.helpers import run_cli

    script = tmp_path / "report.py"
    script.write_text(
        "from accelerate import Accelerator\n"
        "a = Accelerator()\n"
        "print('REPORT', a.mixed_precision, a.gradient_accumulation_steps, a.device.type, a.state.debug)\n"
    )
    result = run_cli(
        "launch", "--cpu", "--mixed_precision", "bf16", "--gradient_accumulation_steps", "3", "--debug",
        str(script), home=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "REPORT bf16 3 cpu True" in result.stdout


# Rank 1 ends after a barrier, while rank 0 is already blocked in an all_reduce that needs it, so
# rank 0 then fails too ("Connection closed by peer", with a traceback) a moment later.
_DIE_ON_RANK_ONE = """
import os, signal, sys
import torch
from accelerate import PartialState

state = PartialState()
torch.distributed.barrier()
if state.process_index == 1:
    how = sys.argv[1]
    if how == "os_exit":
        os._exit(1)
    if how == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    raise ValueError("rank 1 raised on purpose")
torch.distributed.all_reduce(torch.ones(1))
"""


@pytest.mark.parametrize(
    ("how", "code", "status"),
    [("os_exit", 1, "exit code 1"), ("sigkill", 128 + 9, "signal SIGKILL"), ("raise", 1, "exit code 1")],
)
def test_the_rank_that_died_first_is_named_even_without_a_traceback(
    launches: SideBySide, how: str, code: int, status: str
) -> None:
    result = launches.result(f"dies-{how}")
    assert result.returncode == code, result.stderr
    report = result.stderr[result.stderr.index("accelerate launch: rank") :].splitlines()
    assert re.fullmatch(rf"accelerate launch: rank 1 \(pid \d+\) failed with {status} \(the first to fail\).*",
                        report[0]), report  # fmt: skip
    if how == "raise":
        assert "ValueError: rank 1 raised on purpose" in "\n".join(report)
    else:
        assert "no Python traceback" in report[1]
    later = [line for line in report if line.startswith("accelerate launch: rank 0")]
    assert len(later) == 1 and "after rank 1 failed" in later[0], report
    folder = launches.folder(f"dies-{how}")
    assert _torchelastic_folders(folder) == []  # the agent's own log folder was removed after the report
    if how in _LOG_DIR_OF:  # a folder the user named keeps everything, the error file too
        assert list((folder / _LOG_DIR_OF[how]).glob("*/attempt_0/1/error.json")), report


def _wait_for(condition: object, what: str, timeout: float = 60) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_sigterm_to_a_two_process_launch_reaches_both_workers(tmp_path: Path) -> None:
    """scancel / docker stop on a 2-process launch: both training processes end and the launcher says so."""
    import signal

    script = tmp_path / "sleeper.py"
    script.write_text(
        "import os, time\n"
        f"open(os.path.join({str(tmp_path)!r}, 'rank' + os.environ['RANK'] + '.pid'), 'w').write(str(os.getpid()))\n"
        "time.sleep(300)\n"
    )
    pid_files = [tmp_path / f"rank{rank}.pid" for rank in (0, 1)]
    with reserved_port() as port:
        launcher = subprocess.Popen(
            accelerate_cmd("launch", "--cpu", "--num_processes", "2", "--main_process_port", str(port), str(script)),
            env=cli_env(tmp_path), stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            _wait_for(lambda: all(f.exists() and f.read_text() for f in pid_files), "both workers to start")
            workers = [int(f.read_text()) for f in pid_files]
            launcher.send_signal(signal.SIGTERM)
            stderr = launcher.communicate(timeout=60)[1]
            _wait_for(lambda: not any(_alive(pid) for pid in workers), "both workers to end", timeout=30)
        finally:
            if launcher.poll() is None:
                launcher.kill()
    assert launcher.returncode == 128 + signal.SIGTERM, stderr
    assert "stopped by" in stderr and "the processes were stopped" in stderr


_GPU_CONFIG = (
    "compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\nnum_processes: 2\ngpu_ids: all\n"
)


def test_a_multi_gpu_config_on_a_machine_without_gpus_warns_once_and_runs_on_cpu(
    launches: SideBySide,
) -> None:
    config = launches.folder("gpu_config") / "gpu_config.yaml"
    result = launches.result("gpu_config")
    assert result.returncode == 0, result.stderr
    assert sorted(line for line in result.stdout.splitlines() if line.startswith("RAN")) == [
        "RAN 0 2 cpu gloo",
        "RAN 1 2 cpu gloo",
    ]
    warnings = [line for line in result.stderr.splitlines() if "warning" in line.lower()]
    assert warnings == [
        f"accelerate launch: warning: distributed_type: MULTI_GPU (from config file {config}) asks for GPUs, "
        "but no GPU is visible on this machine; running 2 CPU processes instead."
    ]


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--multi_gpu", "--num_processes", "2"], "--multi_gpu"),
        (["--gpu_ids", "0,1"], "--gpu_ids 0,1"),
        (["--config_file", "{config}"], "distributed_type: MULTI_GPU (from config file {config})"),
    ],
)
def test_dry_run_gives_the_same_warning_for_gpu_flags_without_gpus(
    tmp_path: Path, args: list[str], named: str
) -> None:
    config = tmp_path / "gpu_config.yaml"
    config.write_text(_GPU_CONFIG)
    args, named = [a.format(config=config) for a in args], named.format(config=config)
    result = run_cli("launch", "--dry_run", *args, "train.py", home=tmp_path, CUDA_VISIBLE_DEVICES="")
    assert result.returncode == 0, result.stderr
    assert (
        f"Warning: {named} asks for GPUs, but no GPU is visible on this machine; running 2 CPU processes "
        "instead." in result.stdout.splitlines()
    )
    assert "ACCELERATE_USE_CPU=true" in result.stdout and "CUDA_VISIBLE_DEVICES" not in result.stdout


def test_a_dry_run_with_a_busy_port_warns_and_starts_nothing(tmp_path: Path) -> None:
    """A dry run starts nothing, so a port another program listens on is a warning, not an error."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = run_cli("launch", "--dry_run", "--cpu", "--num_processes", "2", "--main_process_port", str(port),
                         "train.py", home=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("accelerate launch --dry_run: nothing was started.")
    row = next(line for line in result.stdout.splitlines() if line.startswith("main_process_port "))
    assert row.split()[1:] == [str(port), "flag", "--main_process_port"]
    assert f"--master_port {port}" in result.stdout  # the command still uses the port asked for
    warning = [line for line in result.stdout.splitlines() if line.startswith("Warning: main_process_port=")]
    assert len(warning) == 1 and "in use on this machine" in warning[0], result.stdout


@pytest.mark.parametrize("sizes", _PARALLELISM_SIZES)
def test_two_processes_get_the_launchers_parallelism_config(
    launches: SideBySide, sizes: tuple[str, str]
) -> None:
    # Upstream ties these flags to FSDP2; on CPU processes tensor parallelism alone must launch.
    out = launches.folder(f"parallelism-{sizes[0]}") / "out"
    result = launches.result(f"parallelism-{sizes[0]}")
    assert result.returncode == 0, result.stdout + result.stderr
    reports = [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(2)]
    dim = sizes[0].removeprefix("--parallelism_config_").removesuffix("_size")
    expected = {"dp_replicate": 1, "dp_shard": 1, "cp": 1, "sp": 1, "tp": 1, dim: 2}
    for report in reports:
        assert report["world"] == 2 and report["from_env"] == expected
        # Where this build's runtime runs the topology, the Accelerator holds the same sizes; where it does
        # not yet (tensor parallelism before the runtime core lands), it refuses by name, never silently.
        if isinstance(report["accelerator"], str):
            assert dim == "tp" and "tp_size=2" in report["accelerator"], report["accelerator"]
        else:
            assert report["accelerator"] == expected and report["state_tp_size"] == expected["tp"]
            assert report["sp_backend"] == ("torch" if dim == "sp" else "deepspeed")
