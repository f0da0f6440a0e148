"""FaultToleranceKwargs and the launcher's --fault_tolerance variables."""

from __future__ import annotations

import pytest

from accelerate import FaultToleranceKwargs
from accelerate.config.env import read_launch_env
from accelerate.utils.dataclasses import collect_kwargs_handlers


def test_settings_are_checked_naming_the_argument() -> None:
    with pytest.raises(ValueError, match="replica_group_id=3"):
        FaultToleranceKwargs(replica_group_id=3, num_replica_groups=3)
    with pytest.raises(ValueError, match="min_replicas=4"):
        FaultToleranceKwargs(num_replica_groups=3, min_replicas=4)
    with pytest.raises(ValueError, match="bind_address"):
        FaultToleranceKwargs(bind_address="http://0.0.0.0")
    with pytest.raises(ValueError, match="lighthouse_address"):
        _ = FaultToleranceKwargs().lighthouse_url
    assert FaultToleranceKwargs(lighthouse_address="127.0.0.1:9").lighthouse_url == "http://127.0.0.1:9"


def test_it_is_a_kwargs_handler_the_accelerator_accepts() -> None:
    handler = FaultToleranceKwargs(num_replica_groups=2)
    assert collect_kwargs_handlers([handler]) == {FaultToleranceKwargs: handler}


def test_the_launcher_variables_become_the_handler() -> None:
    env = {
        "ACCELERATE_FAULT_TOLERANCE": "true", "ACCELERATE_FT_REPLICA_GROUP_ID": "1",
        "ACCELERATE_FT_NUM_REPLICA_GROUPS": "3", "ACCELERATE_FT_LIGHTHOUSE": "127.0.0.1:29510",
        "ACCELERATE_FT_MIN_REPLICAS": "2",
    }  # fmt: skip
    settings = read_launch_env(env).fault_tolerance_settings()
    assert settings == FaultToleranceKwargs(
        replica_group_id=1, num_replica_groups=3, lighthouse_address="127.0.0.1:29510", min_replicas=2
    )
    assert read_launch_env({}).fault_tolerance_settings() is None
