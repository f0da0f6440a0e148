from __future__ import annotations

from typing import Any

import pytest
import torch

from accelerate.tracking import GeneralTracker, on_main_process
from accelerate.tracking.base import as_number, loggable


def test_a_subclass_without_a_name_is_an_error() -> None:
    class Nameless(GeneralTracker):
        pass

    with pytest.raises(NotImplementedError, match="Nameless.*`name`"):
        Nameless()
    blank = GeneralTracker(_blank=True)  # the stand-in get_tracker hands out does nothing
    blank.start()
    blank.store_init_configuration({"lr": 1})
    blank.log({"loss": 1.0}, step=1)
    blank.finish()
    assert blank.tracker is None and blank.main_process_only


class _Recorder(GeneralTracker):
    name = "recorder"

    def __init__(self, main_process_only: bool) -> None:
        super().__init__()
        self.main_process_only = main_process_only
        self.calls: list[Any] = []

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        self.calls.append(values)


def test_on_main_process_runs_on_the_main_process(monkeypatch: pytest.MonkeyPatch) -> None:
    tracker = _Recorder(main_process_only=True)
    tracker.log({"a": 1})
    assert tracker.calls == [{"a": 1}]


def test_log_values_become_numbers() -> None:
    assert as_number(torch.tensor(2.5)) == 2.5 and as_number(torch.tensor([3])) == 3
    assert as_number(True) is True and as_number(7) == 7
    assert as_number(torch.ones(2)) is None and as_number("text") is None and as_number([1.0]) is None


def test_loggable_nests_or_flattens_dicts_and_raises_for_arrays(caplog: pytest.LogCaptureFixture) -> None:
    values = {"loss": torch.tensor(1.5), "d": {"a": torch.tensor([2]), "b": 0.5}, "s": "x"}
    assert loggable("t", values, "numbers", dicts="flatten") == {"loss": 1.5, "d/a": 2, "d/b": 0.5}
    assert "cannot log 's': a str" in caplog.text  # skipped with a warning, never silently
    nested = loggable("t", values, "numbers", keep=lambda v: isinstance(v, str), dicts="nest")
    assert nested == {"loss": 1.5, "d": {"a": 2, "b": 0.5}, "s": "x"}
    with pytest.raises(TypeError, match=r"cannot log 'd/v': a Tensor of shape \(2,\)"):
        loggable("t", {"d": {"v": torch.ones(2)}}, "numbers", dicts="nest")
