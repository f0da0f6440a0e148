from __future__ import annotations

import logging

import pytest

from accelerate.logging import get_logger
from accelerate.state import PartialState
from tests.helpers.pool import WorkerPool


def _log_everywhere() -> list[str]:
    PartialState()
    records: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    logger = get_logger("accelerate.test", log_level="INFO")
    handler = Collect()
    logger.logger.addHandler(handler)
    try:
        logger.info("main only")
        logger.info("every rank", main_process_only=False)
        logger.info("in order", main_process_only=False, in_order=True)
    finally:
        logger.logger.removeHandler(handler)
    return records


def test_logger_writes_on_main_process_by_default(pool2: WorkerPool) -> None:
    main, other = pool2.run(_log_everywhere)
    assert main == ["main only", "every rank", "in order"]
    assert other == ["every rank", "in order"]


def test_logger_before_state_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match="create the Accelerator"):
        get_logger("accelerate.test2").info("too early")


def test_warning_once_warns_once_per_message(caplog) -> None:  # type: ignore[no-untyped-def]
    import logging

    from accelerate.logging import get_logger
    from accelerate.state import PartialState

    PartialState()
    logger = get_logger("accelerate.test.once")
    with caplog.at_level(logging.WARNING, logger="accelerate.test.once"):
        for _ in range(3):
            logger.warning_once("slow path taken")
        get_logger("accelerate.test.once").warning_once("slow path taken")  # another adapter, same logger
        logger.warning_once("other %s", "thing")
    messages = [r.getMessage() for r in caplog.records if r.name == "accelerate.test.once"]
    assert messages == ["slow path taken", "other thing"]
