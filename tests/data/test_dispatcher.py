"""DataLoaderDispatcher's upstream attributes: ``state``, ``torch_device_mesh`` and its sub-meshes."""

from __future__ import annotations

from accelerate.data_loader import DataLoaderDispatcher
from accelerate.state import PartialState


def test_state_and_sub_meshes() -> None:
    loader = DataLoaderDispatcher(list(range(8)), batch_size=2, num_processes=1, process_index=0)
    assert loader.state is PartialState() and loader.state.num_processes == 1
    assert loader.torch_device_mesh is None
    assert (loader.submesh_tp, loader.submesh_dp, loader.submesh_fsdp) == (None, None, None)
    assert [b.tolist() for b in loader] == [[0, 1], [2, 3], [4, 5], [6, 7]]
