from __future__ import annotations

from typing import Any

import pytest

from accelerate import Accelerator
from accelerate.tracking import (
    LOGGER_TYPE_TO_CLASS,
    GeneralTracker,
    LoggerType,
    TensorBoardTracker,
    filter_trackers,
    get_available_trackers,
    register_tracker_class,
)
from accelerate.utils.imports import is_package_available, is_tensorboard_available

_PIP = {
    "aim": "aim", "comet_ml": "comet_ml", "mlflow": "mlflow", "tensorboard": "tensorboard", "wandb": "wandb",
    "clearml": "clearml", "dvclive": "dvclive", "swanlab": "swanlab", "trackio": "trackio",
}  # fmt: skip


class _Custom(GeneralTracker):
    name = "custom"


def test_available_trackers_are_the_installed_ones() -> None:
    available = get_available_trackers()
    assert all(isinstance(member, LoggerType) for member in available)
    assert {str(m) for m in available} == {name for name, pip in _PIP.items() if is_package_available(name)}


@pytest.mark.skipif(not is_tensorboard_available(), reason="tensorboard is not installed")
def test_filter_trackers_accepts_every_form(tmp_path: Any) -> None:
    custom = _Custom()
    got = filter_trackers(["TensorBoard", LoggerType.TENSORBOARD, custom, custom], logging_dir=tmp_path)
    assert got == [LoggerType.TENSORBOARD, custom]  # names and members alike, no duplicates
    assert filter_trackers(None) == [] and filter_trackers(custom) == [custom]
    everything = filter_trackers(["all", custom], logging_dir=tmp_path)
    assert everything == [*get_available_trackers(), custom]
    with pytest.raises(ValueError, match="Logging with `tensorboard` requires a `logging_dir`"):
        filter_trackers("tensorboard")


def test_unknown_name_lists_the_choices() -> None:
    with pytest.raises(
        ValueError, match=r"log_with='tensorbord' is not a known tracker; choose from \['aim'"
    ):
        Accelerator(log_with=["tensorbord"])
    with pytest.raises(TypeError, match="pass an instance"):
        Accelerator(log_with=_Custom)
    with pytest.raises(TypeError, match="expected a tracker name"):
        filter_trackers(3)


@pytest.mark.parametrize("name", sorted(_PIP))
def test_a_missing_package_names_the_pip_command(name: str) -> None:
    if is_package_available(name):
        pytest.skip(f"{name} is installed here")
    with pytest.raises(ImportError, match=f"pip install {_PIP[name]}"):
        Accelerator(log_with=name)
    # Building the tracker class by hand fails the same way, before anything is imported.
    tracker_class: Any = LOGGER_TYPE_TO_CLASS[name]
    args = ("run", ".") if tracker_class.requires_logging_directory else ("run",)
    with pytest.raises(ImportError, match=f"pip install {_PIP[name]}"):
        tracker_class(*args)


def test_constructor_signatures_match_upstream() -> None:
    import inspect

    expected = {
        "aim": "(run_name, logging_dir='.', **kwargs)",
        "comet_ml": "(run_name, **kwargs)",
        "mlflow": "(experiment_name=None, logging_dir=None, run_id=None, tags=None, nested_run=False, "
        "run_name=None, description=None)",
        "tensorboard": "(run_name, logging_dir, **kwargs)",
        "wandb": "(run_name, **kwargs)",
        "clearml": "(run_name=None, **kwargs)",
        "dvclive": "(run_name=None, live=None, **kwargs)",
        "swanlab": "(run_name, **kwargs)",
        "trackio": "(run_name, **kwargs)",
    }
    for name, tracker_class in LOGGER_TYPE_TO_CLASS.items():
        signature = inspect.signature(tracker_class)
        parameters = [p.replace(annotation=p.empty) for p in signature.parameters.values()]
        plain = signature.replace(parameters=parameters, return_annotation=signature.empty)
        assert str(plain) == expected[name], name
        assert tracker_class.name == name


def test_a_registered_class_is_built_from_its_name() -> None:
    built: list[Any] = []

    @register_tracker_class
    class Named(GeneralTracker):
        name = "named_for_test"

        def __init__(self, run_name: str, **kwargs: Any) -> None:
            super().__init__()
            self.run_name, self.kwargs, self.logged = run_name, kwargs, []
            built.append(self)

        def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
            self.logged.append((values, step))

    try:
        accelerator = Accelerator(log_with="named_for_test")
        accelerator.init_trackers("proj", init_kwargs={"named_for_test": {"colour": "blue"}})
        accelerator.log({"x": 1}, step=4)
        (tracker,) = built
        assert (tracker.run_name, tracker.kwargs, tracker.logged) == (
            "proj",
            {"colour": "blue"},
            [({"x": 1}, 4)],
        )
        assert accelerator.get_tracker("named_for_test") is tracker
    finally:
        LOGGER_TYPE_TO_CLASS.pop("named_for_test")
    with pytest.raises(TypeError, match="GeneralTracker subclass"):
        register_tracker_class(dict)  # type: ignore[arg-type]


@pytest.mark.skipif(not is_tensorboard_available(), reason="tensorboard is not installed")
def test_building_a_tracker_imports_no_package_until_start(tmp_path: Any) -> None:
    import subprocess
    import sys

    code = (
        "import sys; from accelerate.tracking import TensorBoardTracker as T\n"
        f"t = T('run', {str(tmp_path)!r})\n"
        "assert 'tensorboard' not in sys.modules, 'built'\n"
        "t.start(); assert 'tensorboard' in sys.modules; t.finish()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    assert TensorBoardTracker.requires_logging_directory


class _WritesFiles(GeneralTracker):
    """A registered tracker that writes files, named with capitals (as users name their classes)."""

    name = "WritesFiles"
    requires_logging_directory = True

    def __init__(self, run_name: str, logging_dir: Any, **kwargs: Any) -> None:
        super().__init__()
        self.made_with = (run_name, str(logging_dir), kwargs)
        self.logged: list[Any] = []

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        self.logged.append((values, step, kwargs))


@pytest.fixture
def writes_files() -> Any:
    register_tracker_class(_WritesFiles)
    yield _WritesFiles
    LOGGER_TYPE_TO_CLASS.pop(_WritesFiles.name)


def test_a_registered_name_is_used_as_written(writes_files: Any, tmp_path: Any) -> None:
    accelerator = Accelerator(log_with=["WritesFiles"], project_dir=tmp_path)
    accelerator.init_trackers("proj", init_kwargs={"WritesFiles": {"colour": "blue"}})
    accelerator.log({"x": 1}, step=2, log_kwargs={"WritesFiles": {"commit": False}})
    tracker = accelerator.get_tracker("WritesFiles")
    assert isinstance(tracker, writes_files)
    assert tracker.made_with == ("proj", str(accelerator.logging_dir), {"colour": "blue"})
    assert tracker.logged == [({"x": 1}, 2, {"commit": False})]
    accelerator.end_training()


def test_a_registered_tracker_that_writes_files_needs_a_logging_dir(writes_files: Any) -> None:
    with pytest.raises(ValueError, match="Logging with `WritesFiles` requires a `logging_dir`"):
        Accelerator(log_with="WritesFiles")


def test_trackers_start_and_are_found_from_values_without_an_accelerator() -> None:
    from accelerate.tracking import find_tracker, start_trackers

    custom = _Custom()
    started = start_trackers([custom], "project", None, {}, logging_dir=None, is_main_process=True)
    assert started == [custom]
    assert find_tracker(started, [custom], "custom", is_main_process=True) is custom
    # A main-process tracker on another rank: a do-nothing stand-in, so the same line runs everywhere.
    assert type(find_tracker([], [custom], "custom", is_main_process=False)) is GeneralTracker
    with pytest.raises(ValueError, match="No tracker named 'other'"):
        find_tracker(started, [custom], "other", is_main_process=True)
