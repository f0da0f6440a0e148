"""accelerate: run a raw PyTorch training loop on any distributed setup with a few changed lines.

Public names are loaded on first use (PEP 562), so ``import accelerate`` stays cheap and the CLI can
start without importing torch.
"""

from __future__ import annotations

from accelerate._lazy import lazy_exports

# Not `from typing import TYPE_CHECKING`: importing typing costs the CLI's start-up; checkers know this idiom.
TYPE_CHECKING = False

# The upstream interface level this package implements (PEP 440): clients gate on it, and resolvers keep
# this package installed instead of replacing it with upstream's.
__version__ = "1.15.0"

_LAZY: dict[str, str] = {
    "Accelerator": "accelerate.accelerator",
    "PartialState": "accelerate.state",
    "AcceleratorState": "accelerate.state",
    "GradientState": "accelerate.state",
    "DistributedType": "accelerate.state",
    "notebook_launcher": "accelerate.launch.in_process",
    "debug_launcher": "accelerate.launch.in_process",
    "init_empty_weights": "accelerate.big_modeling",
    "init_on_device": "accelerate.big_modeling",
    "load_checkpoint_and_dispatch": "accelerate.big_modeling",
    "dispatch_model": "accelerate.big_modeling",
    "infer_auto_device_map": "accelerate.big_modeling",
    "cpu_offload": "accelerate.big_modeling",
    "cpu_offload_with_hook": "accelerate.big_modeling",
    "disk_offload": "accelerate.big_modeling",
    "load_checkpoint_in_model": "accelerate.big_modeling",
    "DeepSpeedPlugin": "accelerate.utils.dataclasses",
    "FullyShardedDataParallelPlugin": "accelerate.utils.dataclasses",
    "skip_first_batches": "accelerate.data_loader",
    "AutocastKwargs": "accelerate.utils.dataclasses",
    "DataLoaderConfiguration": "accelerate.utils.dataclasses",
    "DistributedDataParallelKwargs": "accelerate.utils.dataclasses",
    "GradScalerKwargs": "accelerate.utils.dataclasses",
    "InitProcessGroupKwargs": "accelerate.utils.dataclasses",
    "GradientAccumulationPlugin": "accelerate.utils.dataclasses",
    "ProjectConfiguration": "accelerate.utils.dataclasses",
    "find_executable_batch_size": "accelerate.utils",
    "synchronize_rng_states": "accelerate.utils",
    "is_rich_available": "accelerate.utils.imports",
    "rich": "accelerate.rich",
    "prepare_pippy": "accelerate.inference",
    "ParallelismConfig": "accelerate.state.parallelism",
    "ProfileKwargs": "accelerate.utils.dataclasses",
    "DDPCommunicationHookType": "accelerate.utils.dataclasses",
    # Our addition (not upstream's): fault-tolerant replica groups on torchft.
    "FaultToleranceKwargs": "accelerate.utils.fault_tolerance",
}

__all__ = sorted(_LAZY)

# `name as name` marks each import as a re-export for type checkers, which cannot read the
# computed __all__ above (a user's `mypy --strict` would otherwise reject `from here import name`).
if TYPE_CHECKING:
    from accelerate.accelerator import Accelerator as Accelerator
    from accelerate.state import AcceleratorState as AcceleratorState
    from accelerate.state import DistributedType as DistributedType
    from accelerate.state import GradientState as GradientState
    from accelerate.state import PartialState as PartialState


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
