"""A DeepSpeed configuration (a JSON file or a dict) with dotted-key lookup and ``"auto"`` filling.

``HfDeepSpeedConfig`` is upstream's name (transformers subclasses it). :func:`fill_auto` is the one
place where ``"auto"`` values get what the Accelerator knows, and where a concrete value that
contradicts an Accelerator/launch setting is refused naming both. Pure: no torch, no deepspeed.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

AUTO = "auto"


def load_config(config_file_or_dict: Any) -> dict[str, Any]:
    """A deep copy of a config dict, or the parsed JSON file (a path, or a JSON string)."""
    if isinstance(config_file_or_dict, HfDeepSpeedConfig):
        return copy.deepcopy(config_file_or_dict.config)
    if isinstance(config_file_or_dict, Mapping):
        return copy.deepcopy(dict(config_file_or_dict))
    if isinstance(config_file_or_dict, str | os.PathLike):
        path = Path(config_file_or_dict)
        if path.is_file():
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except json.JSONDecodeError as exc:
                raise ValueError(f"DeepSpeed config file {path} is not valid JSON: {exc}") from None
        else:
            try:
                data = json.loads(str(config_file_or_dict))
            except json.JSONDecodeError:
                raise ValueError(
                    f"DeepSpeed config {str(config_file_or_dict)!r} is neither an existing file nor JSON text; "
                    "pass the path of a DeepSpeed JSON file or a dict."
                ) from None
        if not isinstance(data, dict):
            raise ValueError(
                f"DeepSpeed config {config_file_or_dict} must hold a JSON object, got {type(data).__name__}"
            )
        return data
    raise TypeError(
        f"A DeepSpeed config must be a dict or the path of a JSON file, got {type(config_file_or_dict).__name__}"
    )


class HfDeepSpeedConfig:
    """A DeepSpeed config with dotted-key access (``get_value("zero_optimization.stage")``).

    Example:
        >>> cfg = HfDeepSpeedConfig({"zero_optimization": {"stage": 3}})
        >>> cfg.is_zero3()
        True
    """

    def __init__(self, config_file_or_dict: Any) -> None:
        self.config = load_config(config_file_or_dict)
        self.set_stage_and_offload()

    def set_stage_and_offload(self) -> None:
        stage = self.get_value("zero_optimization.stage", -1)
        self._stage = -1 if stage == AUTO else int(stage)  # "auto" is filled later (DeepSpeedPlugin)
        self._offload = False
        if self.is_zero2() or self.is_zero3():
            devices = {
                self.get_value("zero_optimization.offload_optimizer.device"),
                self.get_value("zero_optimization.offload_param.device"),
            }
            self._offload = bool(devices & {"cpu", "nvme"})

    def find_config_node(self, ds_key_long: str) -> tuple[dict[str, Any] | None, str]:
        """The dict holding the last part of ``ds_key_long`` (None if a parent is missing), and that part."""
        *parents, key = ds_key_long.split(".")
        node: Any = self.config
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
            if node is None:
                return None, key
        return (node if isinstance(node, dict) else None), key

    def get_value(self, ds_key_long: str, default: Any = None) -> Any:
        node, key = self.find_config_node(ds_key_long)
        return default if node is None else node.get(key, default)

    def del_config_sub_tree(self, ds_key_long: str, must_exist: bool = False) -> None:
        node, key = self.find_config_node(ds_key_long)
        if node is None or key not in node:
            if must_exist:
                raise ValueError(f"Can't find {ds_key_long} entry in the DeepSpeed config: {self.config}")
            return
        del node[key]

    def is_true(self, ds_key_long: str) -> bool:
        value = self.get_value(ds_key_long)
        return False if value is None else bool(value)

    def is_false(self, ds_key_long: str) -> bool:
        value = self.get_value(ds_key_long)
        return False if value is None else not bool(value)

    def is_zero2(self) -> bool:
        return self._stage == 2

    def is_zero3(self) -> bool:
        return self._stage == 3

    def is_offload(self) -> bool:
        return self._offload


def set_value(config: dict[str, Any], ds_key_long: str, value: Any) -> None:
    """Sets ``a.b.c`` in ``config``, creating the parent dicts."""
    *parents, key = ds_key_long.split(".")
    node = config
    for part in parents:
        node = node.setdefault(part, {})
    node[key] = value


@dataclass(frozen=True)
class Known:
    """A value the Accelerator knows for a config key, and where it came from (for messages).

    ``must_match``: a concrete value in the JSON that differs is an error (a setting both sides
    make); otherwise the JSON's value wins quietly (a hyper-parameter DeepSpeed owns).
    """

    value: Any
    source: str
    must_match: bool = True


def fill_auto(config: dict[str, Any], known: Mapping[str, Known], *, origin: str) -> list[str]:
    """Fills every ``"auto"`` key of ``config`` found in ``known``; returns the contradictions.

    Each contradiction names the JSON key and value, the Accelerator's value and its source.
    """
    wrapper = HfDeepSpeedConfig.__new__(HfDeepSpeedConfig)
    wrapper.config = config
    mismatches = []
    for key, fact in known.items():
        node, last = wrapper.find_config_node(key)
        current = node.get(last) if node is not None else None
        if current == AUTO:
            set_value(config, key, fact.value)
        elif current is not None and fact.must_match and not _same(current, fact.value):
            mismatches.append(f"{origin} sets {key}={current!r}, but {fact.source} gives {fact.value!r}")
    return mismatches


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return bool(a) == bool(b)
    if isinstance(a, int | float) and isinstance(b, int | float):
        return float(a) == float(b)
    return bool(a == b)


def remaining_auto(config: Any, prefix: str = "") -> list[str]:
    """Dotted keys still set to ``"auto"``."""
    if isinstance(config, dict):
        found = []
        for key, value in config.items():
            found += remaining_auto(value, f"{prefix}{key}.")
        return found
    return [prefix[:-1]] if config == AUTO else []
