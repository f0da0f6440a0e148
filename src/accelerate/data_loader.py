"""Public module path ``accelerate.data_loader``; the code lives in :mod:`accelerate.data`.

``MpDeviceLoaderWrapper`` (upstream's TPU loader) is the XLA backend's, loaded on first use from
:mod:`accelerate.backends.xla.loader`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from accelerate._lazy import lazy_exports
from accelerate.data import (
    BatchSamplerShard,
    DataLoaderAdapter,
    DataLoaderDispatcher,
    DataLoaderShard,
    IterableDatasetShard,
    SeedableRandomSampler,
    SkipBatchSampler,
    SkipDataLoader,
    prepare_data_loader,
    skip_first_batches,
)
from accelerate.data.base import DataLoaderStateMixin
from accelerate.data.samplers import get_sampler

if TYPE_CHECKING:
    from accelerate.backends.xla.loader import MpDeviceLoaderWrapper  # noqa: F401

__getattr__, __dir__ = lazy_exports(__name__, {"MpDeviceLoaderWrapper": "accelerate.backends.xla.loader"})

__all__ = [
    "BatchSamplerShard",
    "DataLoaderAdapter",
    "DataLoaderStateMixin",
    "MpDeviceLoaderWrapper",
    "DataLoaderDispatcher",
    "DataLoaderShard",
    "IterableDatasetShard",
    "SeedableRandomSampler",
    "SkipBatchSampler",
    "SkipDataLoader",
    "get_sampler",
    "prepare_data_loader",
    "skip_first_batches",
]
