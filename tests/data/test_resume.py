"""SkipDataLoader's upstream attribute ``base_dataloader``: the loader over the same data, unskipped."""

from __future__ import annotations

from torch.utils.data import DataLoader

from accelerate.data_loader import SkipDataLoader


def test_skip_data_loader_base_dataloader_reads_the_whole_epoch() -> None:
    loader = SkipDataLoader(list(range(6)), skip_batches=1, batch_size=2)
    base = loader.base_dataloader
    assert type(base) is DataLoader and base.dataset is loader.dataset
    assert loader.base_dataloader is base
    assert [b.tolist() for b in loader] == [[2, 3], [4, 5]]
    assert [b.tolist() for b in base] == [[0, 1], [2, 3], [4, 5]]
