"""``accelerate.commands.config.config_args``: upstream's config-file classes and default locations.

:class:`ClusterConfig` (a local or multi-node run) and :class:`SageMakerConfig` (Amazon SageMaker) are
what :func:`load_config_from_file` returns; both are read through our config-file reader, so old key
names are migrated and unknown keys, wrong types and broken YAML/JSON are errors naming the file.

``hf_cache_home``, ``cache_dir``, ``default_yaml_config_file``, ``default_json_config_file`` and
``default_config_file`` are computed on access from ``HF_HOME`` / ``XDG_CACHE_HOME`` (upstream fixes
them at import), so a changed environment is seen.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from accelerate.config.config_file import DEFAULT_CONFIG_NAME, ConfigFileError, config_from_dict, read_raw
from accelerate.utils.constants import (
    SAGEMAKER_PYTHON_VERSION,
    SAGEMAKER_PYTORCH_VERSION,
    SAGEMAKER_TRANSFORMERS_VERSION,
)

__all__ = ["BaseConfig", "ClusterConfig", "SageMakerConfig", "load_config_from_file"]
_COMPUTED = (
    "cache_dir",
    "default_config_file",
    "default_json_config_file",
    "default_yaml_config_file",
    "hf_cache_home",
)

_C = TypeVar("_C", bound="BaseConfig")


def _hf_cache_home() -> str:
    fallback = os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    return os.path.expanduser(os.environ.get("HF_HOME", fallback))


def _default_config_file() -> str:
    # Upstream names the YAML file for both (its "json" default has kept the .yaml name).
    return os.path.join(_hf_cache_home(), "accelerate", DEFAULT_CONFIG_NAME)


def __getattr__(name: str) -> Any:
    if name == "hf_cache_home":
        return _hf_cache_home()
    if name == "cache_dir":
        return os.path.join(_hf_cache_home(), "accelerate")
    if name in ("default_config_file", "default_yaml_config_file", "default_json_config_file"):
        return _default_config_file()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_COMPUTED])


def load_config_from_file(config_file: str | None) -> BaseConfig:
    """The launch config at ``config_file`` (default: the default location), as upstream's helper.

    Returns a :class:`SageMakerConfig` when the file's ``compute_environment`` is ``AMAZON_SAGEMAKER``,
    else a :class:`ClusterConfig`; their attributes are the file's keys (upstream's names).

    Raises:
        FileNotFoundError: ``config_file`` was given but does not exist, or no default file exists.
        ValueError: the file is not a valid launch config (unknown keys, wrong types, broken YAML).
    """
    path = Path(config_file).expanduser() if config_file is not None else Path(_default_config_file())
    if not path.is_file():
        raise FileNotFoundError(
            f"The passed configuration file `{path}` does not exist. Please pass an existing file to "
            "`accelerate launch`, or write one with `accelerate config`."
        )
    raw = read_raw(path)
    sagemaker = str(raw.get("compute_environment", "LOCAL_MACHINE")) == "AMAZON_SAGEMAKER"
    config_class: type[BaseConfig] = SageMakerConfig if sagemaker else ClusterConfig
    return config_class._from_file(path)


def _plain(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


@dataclass
class BaseConfig:
    """The keys every launch config has (upstream's base class of the two config kinds)."""

    compute_environment: Any
    distributed_type: Any
    mixed_precision: str
    use_cpu: bool
    debug: bool

    def __post_init__(self) -> None:
        from accelerate.utils.dataclasses import ComputeEnvironment, DistributedType
        from accelerate.utils.enums import SageMakerDistributedType

        if isinstance(self.compute_environment, str):
            self.compute_environment = ComputeEnvironment(self.compute_environment)
        if isinstance(self.distributed_type, str):
            if self.compute_environment == ComputeEnvironment.AMAZON_SAGEMAKER:
                self.distributed_type = SageMakerDistributedType(self.distributed_type)
            else:
                self.distributed_type = DistributedType(self.distributed_type)
        if getattr(self, "dynamo_config", None) is None and "dynamo_config" in self._field_names():
            self.__dict__["dynamo_config"] = {}

    @classmethod
    def _field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    def to_dict(self) -> dict[str, Any]:
        """The keys that are set, enums as their string values (what the file holds)."""
        return {key: _plain(value) for key, value in vars(self).items() if value is not None}

    @classmethod
    def _from_file(cls: type[_C], path: str | Path) -> _C:
        file = Path(path).expanduser()
        if not file.is_file():  # upstream opens the file: a missing one is FileNotFoundError
            raise FileNotFoundError(
                f"The config file {file} does not exist; write one with `accelerate config`."
            )
        values = config_from_dict(read_raw(file), str(file)).to_dict()  # migrated, checked and typed
        values.setdefault("compute_environment", "LOCAL_MACHINE")
        values.setdefault("distributed_type", "NO")
        values.setdefault("mixed_precision", "no")
        values.setdefault("use_cpu", False)
        values.setdefault("debug", False)
        names = cls._field_names()
        foreign = sorted(key for key in values if key not in names)
        if foreign:
            raise ConfigFileError(
                f"The config file at {file} had unknown keys ({foreign}) for a {cls.__name__} "
                f"(compute_environment: {values['compute_environment']}); remove them or fix the compute "
                "environment, or run `accelerate config` to write a fresh file."
            )
        try:
            return cls(**values)
        except TypeError as exc:  # a required key (SageMaker's ec2_instance_type, ...) is missing
            raise ConfigFileError(
                f"The config file at {file} is not a complete {cls.__name__}: {exc}"
            ) from None

    @classmethod
    def from_json_file(cls: type[_C], json_file: str | None = None) -> _C:
        """Reads a JSON config file (default: the default config file)."""
        return cls._from_file(json_file if json_file is not None else _default_config_file())

    @classmethod
    def from_yaml_file(cls: type[_C], yaml_file: str | None = None) -> _C:
        """Reads a YAML config file (default: the default config file)."""
        return cls._from_file(yaml_file if yaml_file is not None else _default_config_file())

    def to_json_file(self, json_file: str | os.PathLike[str]) -> None:
        """Writes the config as JSON (keys sorted), creating the folder."""
        file = Path(json_file).expanduser()
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n", encoding="utf-8")

    def to_yaml_file(self, yaml_file: str | os.PathLike[str]) -> None:
        """Writes the config as YAML (keys sorted), creating the folder."""
        import yaml

        file = Path(yaml_file).expanduser()
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(yaml.safe_dump(self.to_dict(), sort_keys=True), encoding="utf-8")


_SECTIONS = (
    "deepspeed_config", "fsdp_config", "megatron_lm_config", "ipex_config", "mpirun_config", "fp8_config",
    "parallelism_config",
)  # fmt: skip


@dataclass
class ClusterConfig(BaseConfig):
    """A launch config for this machine or a cluster of machines (``compute_environment: LOCAL_MACHINE``)."""

    num_processes: int = -1
    machine_rank: int = 0
    num_machines: int = 1
    gpu_ids: str | None = None
    main_process_ip: str | None = None
    main_process_port: int | None = None
    rdzv_backend: str | None = "static"
    same_network: bool | None = False
    main_training_function: str = "main"
    enable_cpu_affinity: bool = False
    fp8_config: dict[str, Any] | None = None
    deepspeed_config: dict[str, Any] | None = None
    fsdp_config: dict[str, Any] | None = None
    parallelism_config: dict[str, Any] | None = None
    megatron_lm_config: dict[str, Any] | None = None
    ipex_config: dict[str, Any] | None = None
    mpirun_config: dict[str, Any] | None = None
    downcast_bf16: str = "no"  # as files hold it ("no", "yes", "all"); upstream also accepts a bool
    tpu_name: str | None = None
    tpu_zone: str | None = None
    tpu_use_cluster: bool = False
    tpu_use_sudo: bool = False
    command_file: str | None = None
    commands: list[str] | None = None
    tpu_vm: list[str] | None = None
    tpu_env: list[str] | None = None
    dynamo_config: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        for section in _SECTIONS:
            if getattr(self, section) is None:
                setattr(self, section, {})
        super().__post_init__()


@dataclass
class SageMakerConfig(BaseConfig):
    """A launch config for Amazon SageMaker (``compute_environment: AMAZON_SAGEMAKER``)."""

    ec2_instance_type: str
    iam_role_name: str
    image_uri: str | None = None
    profile: str | None = None
    region: str = "us-east-1"
    num_machines: int = 1
    gpu_ids: str = "all"
    base_job_name: str = "accelerate-sagemaker-1"
    pytorch_version: str = SAGEMAKER_PYTORCH_VERSION
    transformers_version: str = SAGEMAKER_TRANSFORMERS_VERSION
    py_version: str = SAGEMAKER_PYTHON_VERSION
    sagemaker_inputs_file: str | None = None
    sagemaker_metrics_file: str | None = None
    additional_args: dict[str, Any] | None = None
    dynamo_config: dict[str, Any] | None = None
    enable_cpu_affinity: bool = False
