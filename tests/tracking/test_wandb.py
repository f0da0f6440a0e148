from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from accelerate import Accelerator
from accelerate.utils.imports import is_wandb_available

pytestmark = pytest.mark.skipif(not is_wandb_available(), reason="wandb is not installed")


def _records(path: Path) -> Iterator[bytes]:
    # An offline run file is a LevelDB-style log: a 7-byte file header, then 32 KiB blocks of
    # chunks (crc32, length, type) where a record is one FULL chunk or FIRST, MIDDLE..., LAST.
    raw = path.read_bytes()
    pos, block, pending = 7, 32768, b""
    while pos + 7 <= len(raw):
        room = block - pos % block
        if room < 7:  # a block's tail too short for a chunk header is padding
            pos += room
            continue
        _crc, length, kind = struct.unpack("<IHB", raw[pos : pos + 7])
        data = raw[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 1:
            yield data
        elif kind == 2:
            pending = data
        elif kind == 3:
            pending += data
        elif kind == 4:
            yield pending + data


def _finished_run_file(wandb_dir: Path) -> Path:
    """The offline run file, complete. wandb's service (wandb-core) buffers the file's records and
    flushes them only when it closes the run's stream, which ``run.finish()`` asks for without waiting
    (finish can return while the file still holds only its 7-byte header); ``wandb.teardown()`` stops
    the service and waits for its process to exit, so every stream is closed and flushed after it."""
    import wandb

    wandb.teardown()
    (run_file,) = wandb_dir.glob("wandb/offline-run-*/run-*.wandb")
    return run_file


def _read_run(run_file: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    from wandb.proto import wandb_internal_pb2

    config: dict[str, Any] = {}
    history: list[dict[str, Any]] = []
    for data in _records(run_file):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(data)
        kind = record.WhichOneof("record_type")
        # The config arrives in the run record or in later config records, as wandb batches it.
        updates = (
            record.run.config.update if kind == "run" else record.config.update if kind == "config" else []
        )
        config.update(
            {item.key: json.loads(item.value_json) for item in updates if not item.key.startswith("_")}
        )
        if kind == "history":
            row = {
                item.key or "/".join(item.nested_key): json.loads(item.value_json)
                for item in record.history.item
            }
            history.append(
                {key: value for key, value in row.items() if not key.startswith("_") or key == "_step"}
            )
    return config, history


@pytest.fixture
def wandb_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """wandb offline, all its files under tmp_path; its background service is shut down afterwards
    (a second ``wandb.teardown()`` after ``_finished_run_file``'s is a no-op)."""
    for name, value in {
        "WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DIR": str(tmp_path),
        "WANDB_CONFIG_DIR": str(tmp_path / "config"), "WANDB_CACHE_DIR": str(tmp_path / "cache"),
    }.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    yield
    import wandb

    wandb.teardown()
    os.environ.pop("WANDB_SERVICE", None)  # wandb's pointer to the service it just stopped


def test_wandb_offline_run_holds_config_and_history(tmp_path: Path, wandb_offline: None) -> None:
    accelerator = Accelerator(log_with="wandb")
    accelerator.init_trackers(
        "proj", config={"lr": 0.1, "name": "x"}, init_kwargs={"wandb": {"dir": str(tmp_path)}}
    )
    accelerator.log(
        {"loss": torch.tensor(2.0), "acc": 0.5, "d": {"a": torch.tensor([3.0])}, "s": "text"}, step=1
    )
    accelerator.log({"loss": 1.5}, step=2)
    with pytest.raises(TypeError, match=r"cannot log 'vec': a Tensor of shape \(3,\).*Histogram"):
        accelerator.log({"vec": torch.ones(3)}, step=3)
    accelerator.end_training()

    config, history = _read_run(_finished_run_file(tmp_path))
    assert config == {"lr": 0.1, "name": "x"}
    assert history == [
        {"_step": 1, "loss": 2.0, "acc": 0.5, "d/a": 3.0, "s": "text"},
        {"_step": 2, "loss": 1.5},
    ]


def test_wandb_log_images_passes_its_keywords_on_to_wandb_log(tmp_path: Path, wandb_offline: None) -> None:
    accelerator = Accelerator(log_with="wandb")
    accelerator.init_trackers("proj", init_kwargs={"wandb": {"dir": str(tmp_path)}})
    tracker = accelerator.get_tracker("wandb", unwrap=False)
    image = torch.zeros(3, 4, 4).numpy()
    # wandb.log's own keywords arrive there: an unknown one is refused by wandb itself (it used to be
    # dropped silently), and commit=False holds the images until the scalars of the same step.
    with pytest.raises(TypeError, match="not_a_wandb_keyword"):
        tracker.log_images({"img": [image]}, step=1, not_a_wandb_keyword=True)
    tracker.log_images({"img": [image]}, step=1, commit=False)
    accelerator.log({"loss": 1.0}, step=1)
    accelerator.end_training()

    _, history = _read_run(_finished_run_file(tmp_path))
    assert len(history) == 1 and history[0]["_step"] == 1 and history[0]["loss"] == 1.0
    assert history[0]["img/count"] == 1  # the images landed in the same row as the scalars
