"""Public module path ``accelerate.data_loader``; the code lives in :mod:`accelerate.data`."""

from __future__ import annotations

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
from accelerate.data.adapter import MpDeviceLoaderWrapper
from accelerate.data.base import DataLoaderStateMixin
from accelerate.data.samplers import get_sampler

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
