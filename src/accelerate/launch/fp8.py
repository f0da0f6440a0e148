"""The launcher's fp8 settings: ``--fp8_*`` flags and a config file's ``fp8_config`` section.

Each becomes an ``ACCELERATE_FP8_*`` variable (upstream's names) of the children, written only when
the run's mixed precision is fp8; the Accelerator builds its fp8 recipe from them when the script
passes none (``accelerate.precision.fp8.resolve``). Torch-free: the CLI imports this at start-up.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from accelerate.config.env import parse_bool
from accelerate.utils.imports import is_msamp_available, is_transformer_engine_available

if TYPE_CHECKING:
    from accelerate.config.config_file import LaunchConfig
    from accelerate.launch.plan import Setting

# setting (the flag's name and the LaunchEnv field) -> the fp8_config keys that feed it (upstream
# wrote both spellings over the years).
_CONFIG_KEYS: dict[str, tuple[str, ...]] = {
    "fp8_backend": ("backend",),
    "fp8_pad_inner_dim": ("pad_inner_dim",),
    "fp8_enable_fsdp_float8_all_gather": ("enable_fsdp_float8_all_gather",),
    "fp8_format": ("fp8_format",),
    "fp8_margin": ("margin",),
    "fp8_interval": ("interval",),
    "fp8_amax_history_len": ("amax_history_len", "amax_history_length"),
    "fp8_amax_compute_algo": ("amax_compute_algo", "amax_compute_algorithm"),
    "fp8_override_linear_precision": ("override_linear_precision",),
    "fp8_use_autocast_during_eval": ("use_autocast_during_eval",),
    "fp8_opt_level": ("opt_level", "optimization_level"),
}
SETTINGS = tuple(_CONFIG_KEYS)
# Given as text on the command line ("false" must not read as "not given"): parsed here.
_BOOLS = ("fp8_pad_inner_dim", "fp8_enable_fsdp_float8_all_gather", "fp8_use_autocast_during_eval")


def _config_value(name: str) -> Callable[[LaunchConfig], Any]:
    def read(config: LaunchConfig) -> Any:
        section = config.fp8_config or {}
        for key in _CONFIG_KEYS[name]:
            if section.get(key) is not None:
                value = section[key]
                return ",".join(map(str, value)) if isinstance(value, list | tuple) else value
        return None

    return read


SPEC_ROWS: tuple[tuple[str, Any, Callable[[LaunchConfig], Any], str], ...] = tuple(
    (name, None, _config_value(name), name) for name in SETTINGS
)


def child_env_values(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` without the fp8 settings unless the children train in fp8 (upstream's rule)."""
    if str(values.get("mixed_precision") or "no").lower() == "fp8":
        values = dict(values)
        if values.get("fp8_backend") is not None:
            values["fp8_backend"] = str(values["fp8_backend"]).upper()
        for name in _BOOLS:
            if isinstance(values.get(name), str):
                values[name] = parse_bool(f"--{name}", values[name])
        return values
    return {name: value for name, value in values.items() if name not in SETTINGS}


def check_fp8(settings: Mapping[str, Setting]) -> str | None:
    """The reason the fp8 settings cannot run as given (before any process starts), or None.

    A GPU-only library that is not installed is named here; whether the GPU supports fp8 is checked
    by each process (that needs torch).
    """
    backend = str(settings["fp8_backend"].value or "").upper()
    fp8 = str(settings["mixed_precision"].value or "no").lower() == "fp8"
    if backend and backend not in ("AO", "TE", "MSAMP"):
        return f"fp8_backend={settings['fp8_backend'].value} must be one of AO, TE or MSAMP."
    if not fp8:
        given = [name for name in SETTINGS if settings[name].from_flag]
        if given:
            return (
                f"--{given[0]} configures fp8 training, but mixed_precision is "
                f"{settings['mixed_precision'].value or 'no'}, so it would be ignored. Add --mixed_precision fp8, "
                f"or drop --{given[0]}."
            )
        return None
    missing = {
        "TE": ("transformer-engine", is_transformer_engine_available),
        "MSAMP": ("msamp", is_msamp_available),
    }
    if backend in missing and not missing[backend][1]():
        package = missing[backend][0]
        return (
            f"fp8_backend={backend} (from {settings['fp8_backend'].source}) needs the {package} package and an "
            f"NVIDIA GPU with fp8 support; {package} is not installed (`pip install {package}`). torchao's fp8 "
            "runs on any machine: --fp8_backend AO."
        )
    return None


FLAG_HELP: dict[str, str] = {
    "fp8_backend": "fp8 library: ao (torchao; runs on CPU and GPUs), te (Transformer Engine) or msamp (MS-AMP); "
    "te and msamp need an fp8-capable NVIDIA GPU. Default: the first that can run here.",
    "fp8_pad_inner_dim": "torchao: pad matmul sizes to multiples of 16 (true/false).",
    "fp8_enable_fsdp_float8_all_gather": "torchao: all-gather FSDP2 weights in float8 (true/false; default true under FSDP).",
    "fp8_format": "Transformer Engine: fp8 format (HYBRID, E4M3, E5M2).",
    "fp8_margin": "Transformer Engine: margin of the scaling factor.",
    "fp8_interval": "Transformer Engine: steps between scaling-factor updates.",
    "fp8_amax_history_len": "Transformer Engine: length of the amax history.",
    "fp8_amax_compute_algo": "Transformer Engine: how amax is computed from its history.",
    "fp8_override_linear_precision": "Transformer Engine: (fprop, dgrad, wgrad) computed in high precision.",
    "fp8_use_autocast_during_eval": "Transformer Engine: run fp8 in eval mode too.",
    "fp8_opt_level": "MS-AMP: optimisation level (O1: weights and gradients; O2: also the optimizer).",
}
