"""DeepSpeed engines inside ``save_state`` / ``load_state``'s atomic, manifest-committed folder.

Each engine writes its own checkpoint (``engine.save_checkpoint``: every rank its ZeRO partition of
the optimizer state, rank 0 the module and the scheduler) into the staging folder under upstream's
tag names (``pytorch_model``, ``pytorch_model_1``, ...). The main process then records those files
(size and checksum) so the manifest covers them, and the folder is committed with the rest. Loading
checks the files against the manifest and every engine's parameter shapes (before DeepSpeed touches
an engine), then lets DeepSpeed load a checkpoint of the same layout, or re-partitions one saved
under another ZeRO stage or world size (``portable.py``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from accelerate.checkpointing.checkpoint_io import CheckpointIO
from accelerate.storage.durable_io import CHECKSUM_ALGORITHM, FileRecord, Hasher, fsync_dir
from accelerate.storage.entry_names import entry_path
from accelerate.storage.errors import CheckpointError
from accelerate.storage.manifest import Manifest
from accelerate.storage.verified_read import verify_file

MODEL_NAME = "pytorch_model"
EXTRA_KEY = "deepspeed"
# DeepSpeed's own files beside the tag folders: the name of the latest tag, and its fp32 conversion script.
_SIDE_FILES = ("latest", "zero_to_fp32.py")


def engine_tag(index: int) -> str:
    """Upstream's folder name for engine ``index``: ``pytorch_model``, ``pytorch_model_1``, ..."""
    return MODEL_NAME if index == 0 else f"{MODEL_NAME}_{index}"


def record_file(path: Path) -> FileRecord:
    """Fsyncs a file another writer made and returns its record (size and checksum)."""
    hasher = Hasher(CHECKSUM_ALGORITHM)
    size = 0
    with open(path, "rb", buffering=0) as handle:
        while chunk := handle.read(1 << 22):
            hasher.update(memoryview(chunk))
            size += len(chunk)
        os.fsync(handle.fileno())
    return FileRecord(size=size, checksum=hasher.hexdigest(), algorithm=CHECKSUM_ALGORITHM)


def engine_layout(engine: Any) -> str:
    """What decides an engine's optimizer files beside its stage: the optimizer class that holds the fp32
    masters, the working precision and where the optimizer lives (``"DeepSpeedZeroOptimizer/bf16/cpu"``)."""
    precision = "bf16" if engine.bfloat16_enabled() else "fp16" if engine.fp16_enabled() else "fp32"
    offload = "cpu" if engine.zero_cpu_offload() else "none"
    return f"{type(engine.optimizer).__name__}/{precision}/{offload}"


class EngineCheckpointIO(CheckpointIO):
    """Saves and loads the DeepSpeed engines of one Accelerator (see the module docstring).

    What ``DeepSpeedStrategy.checkpoint_io()`` returns once it has engines: they own the models,
    optimizers and the schedulers they step, so save_state writes only the rest beside them.
    """

    what = "DeepSpeed engines"
    owns_training_objects = True

    def __init__(self, engines: list[Any]) -> None:
        self.engines = list(engines)

    def _world_size(self) -> int:
        return torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1

    def manifest_extra(self) -> dict[str, Any]:
        return {
            EXTRA_KEY: {
                "zero_stages": [int(e.zero_optimization_stage()) for e in self.engines],
                "world_size": self._world_size(),
                "tags": [engine_tag(i) for i in range(len(self.engines))],
                "layouts": [engine_layout(e) for e in self.engines],
            }
        }

    def save_owned(self, staging: Path, writer: bool, **kwargs: Any) -> dict[str, FileRecord]:
        """Every rank writes its part; the writer returns the records of every file written."""
        for index, engine in enumerate(self.engines):
            # An engine built without an optimizer has no checkpoint engine, and DeepSpeed's
            # save_checkpoint then fails on rank 0 only, while the other ranks wait in its barrier (a
            # hang). The condition is the same on every rank, so all of them raise here, before any
            # collective, and save_state reports it on every rank.
            if getattr(engine, "checkpoint_engine", None) is None:
                raise CheckpointError(
                    f"save_state: DeepSpeed engine {index} ({type(engine.module).__name__}) was prepared without an "
                    "optimizer, and DeepSpeed cannot checkpoint such an engine. Prepare it together with its "
                    "optimizer, or leave it out of accelerator.prepare (a frozen model needs no engine) and save "
                    "its weights with accelerator.save_model if they change."
                )
        for index, engine in enumerate(self.engines):
            engine.save_checkpoint(str(staging), engine_tag(index), **kwargs)
        if torch.distributed.is_initialized():
            torch.distributed.barrier()  # every rank's partition is on disk before it is recorded
        if not writer:
            return {}
        records: dict[str, FileRecord] = {}
        for index in range(len(self.engines)):
            folder = staging / engine_tag(index)
            for path in sorted(p for p in folder.rglob("*") if p.is_file()):
                records[path.relative_to(staging).as_posix()] = record_file(path)
            fsync_dir(folder)
        for name in _SIDE_FILES:
            if (staging / name).is_file():
                records[name] = record_file(staging / name)
        return records

    def _moves(self, directory: Path, manifest: Manifest | None) -> bool:
        """Whether the checkpoint has another layout than this run's engines: ZeRO stage, world size,
        precision, or optimizer (DeepSpeed's BF16_Optimizer, CPU offload).

        Such a checkpoint is put back together and re-partitioned (``portable.load_portable``) instead of
        being read by DeepSpeed's ``load_checkpoint``, which needs the layout that wrote it. Stage 0 on both
        sides needs no moving across world sizes: every rank holds the whole state.
        """
        saved = (manifest.extra.get(EXTRA_KEY) if manifest is not None else None) or {}
        stages = saved.get("zero_stages")
        now = [int(e.zero_optimization_stage()) for e in self.engines]
        world = saved.get("world_size")
        layouts = saved.get("layouts")
        moved_stage = stages is not None and list(stages) != now
        partitioned = any(s > 0 for s in [*now, *(stages or [])])
        moved_world = world is not None and int(world) != self._world_size() and partitioned
        moved_layout = layouts is not None and list(layouts) != [engine_layout(e) for e in self.engines]
        return moved_stage or moved_world or moved_layout

    def check_compatible(self, directory: Path, manifest: Manifest | None) -> bool:
        """Checks the folders and every engine's parameter shapes before anything is loaded.

        Returns whether the checkpoint must be re-partitioned (another ZeRO stage or world size).
        """
        from accelerate.backends.deepspeed.portable import check_engine_shapes, saved_shapes, tag_folder

        moves = self._moves(directory, manifest)
        records = manifest.files if manifest is not None else None
        for index, engine in enumerate(self.engines):
            if not (directory / engine_tag(index)).is_dir():
                raise CheckpointError(
                    f"Checkpoint {directory} has no {engine_tag(index)}/ folder for DeepSpeed engine {index}; "
                    "was it saved without DeepSpeed, or with fewer models?"
                )
            folder = tag_folder(directory, engine_tag(index), records)
            source = f"Checkpoint {directory / engine_tag(index)}"
            check_engine_shapes(engine, saved_shapes(folder), source=source, index=index)
        return moves

    def load_owned(self, directory: Path, manifest: Manifest | None, **kwargs: Any) -> None:
        from accelerate.backends.deepspeed.portable import load_portable, tag_folder

        if manifest is not None:
            for name, record in manifest.files.items():
                if name.split("/", 1)[0] in {engine_tag(i) for i in range(len(self.engines))}:
                    verify_file(entry_path(directory, name), record)
        moves = self.check_compatible(directory, manifest)
        records = manifest.files if manifest is not None else None
        for index, engine in enumerate(self.engines):
            if moves:
                load_portable(engine, tag_folder(directory, engine_tag(index), records), index=index)
                continue
            path, _ = engine.load_checkpoint(str(directory), engine_tag(index), **kwargs)
            if path is None:
                raise CheckpointError(
                    f"DeepSpeed could not load {directory / engine_tag(index)} into engine {index}."
                )
