"""Distributed data loading: sharding, dispatching, RNG sync, exact resume, gathering for metrics.

Modules, each with one job: `samplers` (seedable shuffle, batch sampler shard), `iterable`
(iterable dataset shard), `base` (what prepared loaders share: epoch, position, RNG sync, state),
`shard_loader` (`DataLoaderShard`), `adapter` (`DataLoaderAdapter`), `dispatcher` (`DataLoaderDispatcher`), `resume`
(`skip_first_batches`), `prepare` (`prepare_data_loader`) and `metrics` (`gather_for_metrics`).
The public import path is `accelerate.data_loader`.
"""

from __future__ import annotations

from accelerate.data.adapter import DataLoaderAdapter
from accelerate.data.dispatcher import DataLoaderDispatcher
from accelerate.data.iterable import IterableDatasetShard, is_sharded_by_rank
from accelerate.data.metrics import gather_for_metrics
from accelerate.data.prepare import prepare_data_loader
from accelerate.data.resume import SkipBatchSampler, SkipDataLoader, skip_first_batches
from accelerate.data.samplers import BatchSamplerShard, SeedableRandomSampler
from accelerate.data.shard_loader import DataLoaderShard

__all__ = [
    "BatchSamplerShard",
    "DataLoaderAdapter",
    "DataLoaderDispatcher",
    "DataLoaderShard",
    "IterableDatasetShard",
    "SeedableRandomSampler",
    "SkipBatchSampler",
    "SkipDataLoader",
    "gather_for_metrics",
    "is_sharded_by_rank",
    "prepare_data_loader",
    "skip_first_batches",
]
