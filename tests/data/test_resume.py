"""SkipDataLoader's upstream attribute ``base_dataloader``: the loader over the same data, unskipped."""

from __future__ import annotations

from torch.utils.data import DataLoader

from accelerate.data_loader import SkipDataLoader
from tests.data.helpers import IndexDataset


def test_skip_data_loader_base_dataloader_reads_the_whole_epoch() -> None:
    loader = SkipDataLoader(list(range(6)), skip_batches=1, batch_size=2)
    base = loader.base_dataloader
    assert type(base) is DataLoader and base.dataset is loader.dataset
    assert loader.base_dataloader is base
    assert [b.tolist() for b in loader] == [[2, 3], [4, 5]]
    assert [b.tolist() for b in base] == [[0, 1], [2, 3], [4, 5]]


class _Feeder:
    """A backend's device-feeding loader (as XLA's MpDeviceLoaderWrapper) reduced to the protocol."""

    def __init__(self, dataloader: DataLoader, device: str) -> None:
        self.dataloader, self.device = dataloader, device

    def rewrap(self, dataloader: DataLoader) -> _Feeder:
        return _Feeder(dataloader, self.device)

    def __len__(self) -> int:
        return len(self.dataloader)


def test_skip_first_batches_skips_inside_a_device_feeding_loader_and_rewraps_it() -> None:
    from accelerate.data.resume import DeviceFeedingLoader
    from accelerate.data_loader import skip_first_batches

    feeder = _Feeder(DataLoader(IndexDataset(6), batch_size=2), "xla:0")
    assert isinstance(feeder, DeviceFeedingLoader)
    rest = skip_first_batches(feeder, 1)  # type: ignore[arg-type]
    assert isinstance(rest, _Feeder) and rest.device == "xla:0"
    assert [b.tolist() for b in rest.dataloader] == [[2, 3], [4, 5]]
