"""`gather_for_metrics`: gather a step's outputs and drop the samples padded into the last round.

Why trimming the *end* is exact: with ``even_batches`` the prepared loaders put every duplicated
sample at the end of the last round (the short last batch is filled up, then whole batches are
added after it), and a gather concatenates the processes' batches in rank order — which is the
order of the round. So over an epoch, gathering every step returns exactly the dataset, in the
order one process would have read it, for ``split_batches`` True or False, with or without
shuffling, ``drop_last`` (minus the dropped samples) and dispatched batches.

With ``even_batches=False`` processes may have different batch counts at the end, so a
collective on the last step would wait for a process that has no batch; gather yourself there.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from accelerate.collectives.operations import gather, gather_object
from accelerate.utils.tree import recursively_apply

logger = logging.getLogger(__name__)


def _only_tensors(data: Any) -> bool:
    if isinstance(data, torch.Tensor):
        return True
    if isinstance(data, list | tuple):
        return all(_only_tensors(item) for item in data)
    if isinstance(data, dict):
        return all(_only_tensors(item) for item in data.values())
    return False


def gather_for_metrics(
    data: Any,
    *,
    gradient_state: Any,
    num_processes: int,
    use_gather_object: bool = False,
    data_shards: int | None = None,
) -> Any:
    """Gathers ``data`` from every process; on the epoch's last batch, drops the padded duplicates.

    Args:
        data: a tensor or nested structure of tensors whose first dimension is the batch; or any
            picklable object (gathered with ``gather_object``; a list per process is one list).
        gradient_state: the `GradientState` (its active loader says if this is the last batch and
            how many samples were padded).
        num_processes: processes taking part.
        use_gather_object: gather as python objects even if ``data`` holds only tensors.
        data_shards: how many different batches the processes read (the data-parallel size; None:
            one per process). Under tensor/context parallelism the consecutive ranks of one group
            read the same batch, so only the first rank of each group is kept: each sample once.

    Returns:
        The gathered data, with the last ``remainder`` samples removed on the last batch.

    Example:
        >>> for batch in eval_loader:
        ...     preds = model(batch["x"]).argmax(-1)
        ...     all_preds.append(accelerator.gather_for_metrics(preds))
    """
    as_objects = use_gather_object or not _only_tensors(data)
    group = num_processes // data_shards if data_shards else 1
    if group > 1:
        gathered = _gather_one_per_group(data, as_objects, num_processes, group)
        num_processes = num_processes // group
    else:
        gathered = gather_object(data) if as_objects else gather(data)
    if num_processes == 1 or not gradient_state.end_of_dataloader:
        return gathered
    duplicates = int(gradient_state.remainder)
    if duplicates < 0:
        logger.warning(
            "gather_for_metrics: the number of samples padded into the last batch is unknown (an iterable "
            "dataset without a length read in worker processes); returning everything gathered — drop the "
            "duplicates yourself, or give the dataset a __len__."
        )
        return gathered
    if duplicates == 0:
        return gathered
    if as_objects:
        # Only a per-sample list can be trimmed; one object per process has no samples to drop.
        return gathered[: len(gathered) - duplicates] if isinstance(data, list) else gathered

    def _trim(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.dim() == 0 or tensor.shape[0] < duplicates:
            return tensor
        return tensor[: tensor.shape[0] - duplicates]

    return recursively_apply(_trim, gathered)


def _gather_one_per_group(data: Any, as_objects: bool, num_processes: int, group: int) -> Any:
    """Gathers from every process, keeping the first of each ``group`` consecutive ranks (the ranks
    of one tensor-parallel group hold the same samples)."""
    if as_objects:
        per_rank = gather_object([data])  # one entry per rank, lists kept whole
        kept = per_rank[::group]
        if isinstance(data, list):
            return [item for part in kept for item in part]
        return kept

    def _first_of_groups(tensor: torch.Tensor) -> torch.Tensor:
        per = tensor.shape[0] // num_processes  # gather needs the same shape on every rank
        chunks = [tensor[rank * per : (rank + 1) * per] for rank in range(0, num_processes, group)]
        return torch.cat(chunks)

    return recursively_apply(_first_of_groups, gather(data))
