"""Checkpointing: model weight files, the full training state, project folders, atomic commits.

The ``Accelerator`` facade calls into this package; users meet it through ``save_state`` /
``load_state`` / ``save_model`` and ``accelerate.utils.load_checkpoint_in_model``.
"""

from __future__ import annotations

from accelerate._lazy import lazy_exports

# Loaded on first use (PEP 562): the Accelerator imports this package at start-up, and the file
# formats behind it are only needed once a checkpoint is written or read.
_LAZY: dict[str, str] = {
    "AtomicCheckpoint": "accelerate.storage.atomic",
    "CheckpointError": "accelerate.storage.errors",
    "DiskFullError": "accelerate.storage.errors",
    "FileRecord": "accelerate.storage.durable_io",
    "MANIFEST_NAME": "accelerate.storage.durable_io",
    "Manifest": "accelerate.storage.manifest",
    "SAFE_WEIGHTS_INDEX_NAME": "accelerate.storage.model_files",
    "SAFE_WEIGHTS_NAME": "accelerate.storage.model_files",
    "WEIGHTS_INDEX_NAME": "accelerate.storage.model_files",
    "WEIGHTS_NAME": "accelerate.storage.model_files",
    "check_checkpointable": "accelerate.checkpointing.objects",
    "checkpoint_dir": "accelerate.checkpointing.project",
    "is_committed": "accelerate.storage.atomic",
    "latest_checkpoint": "accelerate.checkpointing.project",
    "list_checkpoints": "accelerate.checkpointing.project",
    "load_accelerator_state": "accelerate.checkpointing.functional",
    "load_custom_state": "accelerate.checkpointing.functional",
    "load_state_dict_file": "accelerate.storage.model_files",
    "load_training_state": "accelerate.checkpointing.training_state_load",
    "next_iteration": "accelerate.checkpointing.project",
    "parse_size": "accelerate.storage.sizes",
    "read_manifest": "accelerate.storage.atomic",
    "rotate_checkpoints": "accelerate.checkpointing.project",
    "save_accelerator_state": "accelerate.checkpointing.functional",
    "save_custom_state": "accelerate.checkpointing.functional",
    "save_model_files": "accelerate.storage.model_files",
    "save_training_state": "accelerate.checkpointing.training_state",
    "verify_checkpoint": "accelerate.storage.atomic",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
