"""The launch config file (``default_config.yaml``): schema, versioned loading, saving, location.

The key names are Hugging Face Accelerate's, so a file written by upstream's ``accelerate config``
loads unchanged, and a file we write loads in upstream too (we never add keys of our own, not even a
version number). Upstream files carry no version, so the schema version is inferred from the keys a
file uses, and :func:`migrate` lifts an old file to the current schema step by step:

=======  ==============================================================================
version  what changed
=======  ==============================================================================
1        ``fp16: true|false`` instead of ``mixed_precision`` (accelerate < 0.7)
2        a top-level ``dynamo_backend`` key (accelerate 0.15 - 0.17)
3        current: ``mixed_precision``, nested ``dynamo_config``, ``distributed_type: XLA``
=======  ==============================================================================

Everything here is pure: no torch import and no ``os.environ`` reads (callers pass ``environ``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accelerate.utils.enums import MIXED_PRECISION_MODES

SCHEMA_VERSION = 3

# Values the loader accepts; a value outside these lists is reported with the allowed ones.
COMPUTE_ENVIRONMENTS = ("LOCAL_MACHINE", "AMAZON_SAGEMAKER")
# SageMaker's own vocabulary (upstream's SageMakerDistributedType), for compute_environment: AMAZON_SAGEMAKER.
SAGEMAKER_DISTRIBUTED_TYPES = ("NO", "DATA_PARALLEL", "MODEL_PARALLEL")
DISTRIBUTED_TYPES = (
    "NO", "MULTI_CPU", "MULTI_GPU", "MULTI_XPU", "MULTI_MPS", "MULTI_NPU", "MULTI_MLU", "MULTI_SDAA",
    "MULTI_MUSA", "MULTI_HPU", "DEEPSPEED", "FSDP", "XLA", "MEGATRON_LM",
)  # fmt: skip
RDZV_BACKENDS = ("static", "c10d", "etcd", "etcd-v2")


class ConfigFileError(ValueError):
    """A config file that cannot be read, with the file and the offending key in the message."""


class UnknownConfigKeysError(ConfigFileError):
    """The file has keys that are not part of the schema; ``keys`` lists every one of them."""

    def __init__(self, path: str, keys: list[str]) -> None:
        self.keys = keys
        names = ", ".join(repr(k) for k in keys)
        super().__init__(
            f"The config file {path} has {len(keys)} unknown key{'s' if len(keys) > 1 else ''}: {names}. "
            "Remove or rename them (check the spelling against `accelerate config`'s output), or run "
            "`accelerate config` to write a fresh file."
        )


@dataclass
class LaunchConfig:
    """The content of a launch config file. ``None`` means "the file does not set this key".

    Nested sections (``deepspeed_config``, ``fsdp_config``, ...) are kept as plain dicts: the
    launcher only needs to know whether they are in use, and the backends read their own keys.
    """

    compute_environment: str | None = None
    distributed_type: str | None = None
    mixed_precision: str | None = None
    use_cpu: bool | None = None
    debug: bool | None = None
    num_processes: int | None = None
    num_machines: int | None = None
    machine_rank: int | None = None
    main_process_ip: str | None = None
    main_process_port: int | None = None
    rdzv_backend: str | None = None
    same_network: bool | None = None
    main_training_function: str | None = None
    gpu_ids: str | None = None
    downcast_bf16: str | None = None
    enable_cpu_affinity: bool | None = None
    dynamo_config: dict[str, Any] | None = None
    deepspeed_config: dict[str, Any] | None = None
    fsdp_config: dict[str, Any] | None = None
    megatron_lm_config: dict[str, Any] | None = None
    ipex_config: dict[str, Any] | None = None
    mpirun_config: dict[str, Any] | None = None
    fp8_config: dict[str, Any] | None = None
    parallelism_config: dict[str, Any] | None = None
    tpu_name: str | None = None
    tpu_zone: str | None = None
    tpu_use_cluster: bool | None = None
    tpu_use_sudo: bool | None = None
    tpu_vm: list[str] | None = None
    tpu_env: list[str] | None = None
    commands: list[str] | None = None
    command_file: str | None = None
    # Amazon SageMaker (compute_environment: AMAZON_SAGEMAKER)
    ec2_instance_type: str | None = None
    iam_role_name: str | None = None
    image_uri: str | None = None
    profile: str | None = None
    region: str | None = None
    base_job_name: str | None = None
    pytorch_version: str | None = None
    transformers_version: str | None = None
    py_version: str | None = None
    sagemaker_inputs_file: str | None = None
    sagemaker_metrics_file: str | None = None
    additional_args: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The keys this config sets, in schema order (what :func:`save_config_file` writes)."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if getattr(self, f.name) is not None
        }

    def set_keys(self) -> frozenset[str]:
        return frozenset(self.to_dict())

    @property
    def dynamo_backend(self) -> str | None:
        """The torch.compile backend named in ``dynamo_config``, lower-cased (``None`` if unset)."""
        backend = (self.dynamo_config or {}).get("dynamo_backend")
        return None if backend is None else str(backend).lower()


_FIELD_TYPES: dict[str, str] = {
    f.name: str(f.type).replace(" | None", "") for f in dataclasses.fields(LaunchConfig)
}
KNOWN_KEYS = frozenset(_FIELD_TYPES)
# Keys that old files use and :func:`migrate` rewrites.
LEGACY_KEYS = frozenset({"fp16", "dynamo_backend"})


def detect_schema_version(raw: Mapping[str, Any]) -> int:
    """Which schema version wrote ``raw`` (see the module docstring)."""
    if "fp16" in raw:
        return 1
    if "dynamo_backend" in raw:
        return 2
    return SCHEMA_VERSION


def migrate(raw: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Lifts ``raw`` to the current schema. Returns the new mapping and one line per change."""
    data = dict(raw)
    changes: list[str] = []
    if "fp16" in data:
        fp16 = data.pop("fp16")
        if "mixed_precision" not in data:
            data["mixed_precision"] = "fp16" if _truthy(fp16) else "no"
        changes.append(f"fp16: {fp16} -> mixed_precision: {data['mixed_precision']}")
    if "dynamo_backend" in data:
        backend = data.pop("dynamo_backend")
        if str(backend).upper() not in ("NO", "FALSE", "NONE") and "dynamo_config" not in data:
            data["dynamo_config"] = {"dynamo_backend": str(backend).upper()}
        changes.append(f"dynamo_backend: {backend} -> dynamo_config.dynamo_backend")
    if str(data.get("distributed_type")) == "TPU":
        data["distributed_type"] = "XLA"
        changes.append("distributed_type: TPU -> XLA")
    return data, changes


def _truthy(value: Any) -> bool:
    return value is True or str(value).strip().lower() in ("true", "yes", "1", "y")


def _coerce(path: str, key: str, value: Any, sagemaker: bool = False) -> Any:
    """Checks one value against its field type, fixing YAML 1.1 surprises (``NO`` reads as False)."""
    if value is None:
        return None
    kind = _FIELD_TYPES[key]

    def bad(expected: str) -> ConfigFileError:
        return ConfigFileError(f"The config file {path} sets {key}: {value!r}, but {key} must be {expected}.")

    if key == "distributed_type":
        # An unquoted NO is a YAML boolean; upstream quotes it, but hand-written files often do not.
        text = "NO" if value is False else str(value).upper()
        # Upstream reads a SageMaker file's distributed_type as a SageMakerDistributedType.
        allowed = SAGEMAKER_DISTRIBUTED_TYPES if sagemaker else DISTRIBUTED_TYPES
        if text not in allowed:
            where = " (compute_environment: AMAZON_SAGEMAKER)" if sagemaker else ""
            raise bad("one of " + ", ".join(allowed) + where)
        return text
    if key == "mixed_precision":
        text = "no" if value is False else str(value).lower()
        if text not in MIXED_PRECISION_MODES:
            raise bad("one of " + ", ".join(MIXED_PRECISION_MODES))
        return text
    if key == "compute_environment":
        text = str(value).upper()
        if text not in COMPUTE_ENVIRONMENTS:
            raise bad("one of " + ", ".join(COMPUTE_ENVIRONMENTS))
        return text
    if key == "downcast_bf16":
        return ("yes" if value else "no") if isinstance(value, bool) else str(value)
    if key == "gpu_ids":
        if isinstance(value, list | tuple):
            return ",".join(str(v) for v in value)
        return str(value)
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if str(value).lower() in ("true", "yes", "1", "false", "no", "0"):
            return _truthy(value)
        raise bad("true or false")
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise bad("an integer")
        try:
            return int(value)
        except ValueError:
            raise bad("an integer") from None
    if kind == "str":
        return str(value)
    if kind.startswith("dict"):
        if not isinstance(value, dict):
            raise bad("a mapping (key: value lines indented under it)")
        return dict(value)
    if kind.startswith("list"):
        if not isinstance(value, list):
            raise bad("a list")
        return list(value)
    return value


def config_from_dict(raw: Mapping[str, Any], path: str = "<dict>") -> LaunchConfig:
    """Builds a :class:`LaunchConfig` from a mapping, migrating old keys and rejecting unknown ones."""
    data, _ = migrate(raw)
    unknown = sorted(str(k) for k in data if k not in KNOWN_KEYS)
    if unknown:
        raise UnknownConfigKeysError(path, unknown)
    sagemaker = str(data.get("compute_environment", "")).upper() == "AMAZON_SAGEMAKER"
    values = {key: _coerce(path, key, value, sagemaker) for key, value in data.items()}
    return LaunchConfig(**values)


def read_raw(path: str | Path) -> dict[str, Any]:
    """The file's top-level mapping, as written (YAML, or JSON for a ``.json`` file)."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigFileError(f"The config file {file} does not exist.") from None
    except OSError as exc:
        raise ConfigFileError(f"The config file {file} cannot be read: {exc}") from None
    try:
        if file.suffix == ".json":
            data = json.loads(text) if text.strip() else {}
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as exc:  # yaml.YAMLError / json.JSONDecodeError: report the position they give
        raise ConfigFileError(f"The config file {file} is not valid {_kind(file)}: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigFileError(
            f"The config file {file} must hold a mapping of keys, not a {type(data).__name__}."
        )
    return data


def _kind(file: Path) -> str:
    return "JSON" if file.suffix == ".json" else "YAML"


def load_config_file(path: str | Path) -> LaunchConfig:
    """Loads a YAML or JSON launch config written by any version of ``accelerate config``.

    Example:
        >>> config = load_config_file("~/.cache/huggingface/accelerate/default_config.yaml")
        >>> config.num_processes
        2
    """
    file = Path(path).expanduser()
    return config_from_dict(read_raw(file), str(file))


def save_config_file(config: LaunchConfig, path: str | Path) -> Path:
    """Writes ``config`` as YAML (or JSON for a ``.json`` path), creating the folder. Returns the path."""
    file = Path(path).expanduser()
    file.parent.mkdir(parents=True, exist_ok=True)
    data = config.to_dict()
    if file.suffix == ".json":
        text = json.dumps(data, indent=2) + "\n"
    else:
        import yaml

        text = yaml.safe_dump(data, sort_keys=True, default_flow_style=False)
    # Write beside the target and rename, so an interrupted write never leaves half a config behind.
    tmp = file.with_name(file.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(file)
    return file


# --- where the file lives -----------------------------------------------------------------------
CONFIG_FILE_ENV = "ACCELERATE_CONFIG_FILE"
DEFAULT_CONFIG_NAME = "default_config.yaml"


def default_config_dir(environ: Mapping[str, str]) -> Path:
    """``$HF_HOME/accelerate``, else ``$XDG_CACHE_HOME/huggingface/accelerate``, else ``~/.cache/...``."""
    if environ.get("HF_HOME"):
        return Path(environ["HF_HOME"]).expanduser() / "accelerate"
    if environ.get("XDG_CACHE_HOME"):
        return Path(environ["XDG_CACHE_HOME"]).expanduser() / "huggingface" / "accelerate"
    home = Path(environ["HOME"]) if environ.get("HOME") else Path.home()
    return home / ".cache" / "huggingface" / "accelerate"


def default_config_path(environ: Mapping[str, str]) -> Path:
    """Where ``accelerate config`` writes when no ``--config_file`` is given."""
    return default_config_dir(environ) / DEFAULT_CONFIG_NAME


@dataclass(frozen=True)
class ConfigLocation:
    """Which config file a command uses and why. ``path`` is None when there is none to read."""

    path: Path | None
    source: str  # "flag" | "environment" | "default"
    searched: tuple[Path, ...] = field(default=())

    @property
    def description(self) -> str:
        if self.path is None:
            where = " or ".join(str(p) for p in self.searched)
            return f"no config file (none at {where})"
        how = {"flag": "--config_file", "environment": f"${CONFIG_FILE_ENV}", "default": "default location"}
        return f"{self.path} ({how[self.source]})"


def locate_config_file(config_file: str | None, environ: Mapping[str, str]) -> ConfigLocation:
    """Finds the config file: ``--config_file`` > ``$ACCELERATE_CONFIG_FILE`` > the default location.

    An explicitly named file that does not exist is an error; a missing default file is not (the
    launcher then runs with defaults and says so).
    """
    if config_file:
        path = Path(config_file).expanduser()
        if not path.is_file():
            raise ConfigFileError(f"--config_file {config_file}: no such file.")
        return ConfigLocation(path, "flag")
    if environ.get(CONFIG_FILE_ENV):
        path = Path(environ[CONFIG_FILE_ENV]).expanduser()
        if not path.is_file():
            raise ConfigFileError(f"{CONFIG_FILE_ENV}={environ[CONFIG_FILE_ENV]}: no such file.")
        return ConfigLocation(path, "environment")
    folder = default_config_dir(environ)
    # Very old upstream versions wrote default_config.json; the YAML file wins when both exist.
    candidates = (folder / DEFAULT_CONFIG_NAME, folder / "default_config.json")
    for candidate in candidates:
        if candidate.is_file():
            return ConfigLocation(candidate, "default", candidates)
    return ConfigLocation(None, "default", candidates)
