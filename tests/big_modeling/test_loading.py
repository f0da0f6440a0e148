from __future__ import annotations

import hashlib
import json
import logging
import struct
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from accelerate import init_empty_weights, load_checkpoint_in_model
from accelerate.utils import OffloadedWeightsLoader, load_state_dict
from tests.big_modeling.tiny_models import TiedLM, reference


def _save(model: torch.nn.Module, folder: Path, drop: tuple[str, ...] = ("head.weight",)) -> Path:
    state = {k: v.contiguous() for k, v in model.state_dict().items() if k not in drop}
    save_file(state, str(folder / "model.safetensors"))
    return folder / "model.safetensors"


def _empty() -> TiedLM:
    with init_empty_weights():
        return TiedLM()


def test_load_state_dict_reads_safetensors_and_bin(tmp_path: Path) -> None:
    ref = reference()
    path = _save(ref, tmp_path)
    state = load_state_dict(path, device_map={"": "cpu"})
    assert torch.equal(state["embed.weight"], ref.embed.weight)
    torch.save(ref.state_dict(), tmp_path / "pytorch_model.bin")
    state = load_state_dict(tmp_path / "pytorch_model.bin")
    assert torch.equal(state["blocks.1.up.weight"], ref.blocks[1].up.weight)


def test_load_into_empty_model_with_cpu_and_disk(tmp_path: Path) -> None:
    ref = reference()
    _save(ref, tmp_path)
    model = _empty()
    device_map = {"embed": "cpu", "head": "cpu", "blocks.0": "cpu", "blocks": "disk", "scale": "cpu"}
    offload = tmp_path / "offload"
    load_checkpoint_in_model(model, tmp_path, device_map=device_map, offload_folder=offload)
    assert torch.equal(model.embed.weight, ref.embed.weight) and model.head.weight is model.embed.weight
    assert torch.equal(model.blocks[0].up.weight, ref.blocks[0].up.weight)
    assert model.blocks[3].up.weight.device.type == "meta"  # on disk, not in memory
    on_disk = OffloadedWeightsLoader(save_folder=offload)
    assert "blocks.3.up.weight" in on_disk and "embed.weight" not in on_disk
    assert torch.equal(on_disk["blocks.3.up.weight"], ref.blocks[3].up.weight)


def test_offload_state_dict_gives_the_same_result(tmp_path: Path) -> None:
    ref = reference()
    _save(ref, tmp_path)
    model = _empty()
    device_map = {"": "cpu", "blocks.5": "disk"}
    load_checkpoint_in_model(
        model, tmp_path, device_map=device_map, offload_folder=tmp_path / "off", offload_state_dict=True
    )
    assert torch.equal(model.blocks[4].down.weight, ref.blocks[4].down.weight)


def test_dtype_and_keep_in_fp32(tmp_path: Path) -> None:
    _save(reference(), tmp_path)
    model = _empty()
    load_checkpoint_in_model(model, tmp_path, dtype=torch.float16, keep_in_fp32_modules=["norm"])
    assert model.blocks[0].up.weight.dtype == torch.float16
    assert model.blocks[0].norm.weight.dtype == torch.float32


def test_missing_weights_are_listed(tmp_path: Path) -> None:
    _save(reference(), tmp_path, drop=("head.weight", "blocks.2.up.weight", "blocks.2.up.bias"))
    with pytest.raises(ValueError, match=r"blocks\.2\.up\.weight, blocks\.2\.up\.bias"):
        load_checkpoint_in_model(_empty(), tmp_path)
    materialised = reference()
    with pytest.raises(ValueError, match=r"missing from the checkpoint: blocks\.2\.up\.weight"):
        load_checkpoint_in_model(materialised, tmp_path, strict=True)
    load_checkpoint_in_model(materialised, tmp_path)  # not strict: real weights stay, a warning is logged


def test_unexpected_weights_with_strict(tmp_path: Path) -> None:
    ref = reference()
    state = {k: v.contiguous() for k, v in ref.state_dict().items() if k != "head.weight"}
    save_file({**state, "extra": torch.zeros(1)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match="not in the model: extra"):
        load_checkpoint_in_model(_empty(), tmp_path, strict=True)


@pytest.mark.parametrize("device_map", [None, {"": "cpu"}])
def test_unexpected_weights_are_logged_in_upstream_words(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, device_map: dict[str, str] | None
) -> None:
    ref = reference()
    state = {k: v.contiguous() for k, v in ref.state_dict().items() if k != "head.weight"}
    path = tmp_path / "model.safetensors"
    save_file({**state, "extra": torch.zeros(1)}, str(path))
    with caplog.at_level(logging.WARNING):
        load_checkpoint_in_model(reference(), str(path), device_map=device_map)
    assert (
        f"Some weights of the model checkpoint at {path} were not used when initializing TiedLM: ['extra']. This "
        "may or may not be an issue - make sure that the checkpoint does not have unnecessary parameters, or that "
        "the model definition correctly corresponds to the checkpoint."
    ) in caplog.messages


def test_disk_without_offload_folder_is_an_error(tmp_path: Path) -> None:
    _save(reference(), tmp_path)
    with pytest.raises(ValueError, match="offload_folder"):
        load_checkpoint_in_model(_empty(), tmp_path, device_map={"": "disk"})


def test_state_dict_of_an_offloaded_model(tmp_path: Path) -> None:
    from accelerate import cpu_offload
    from accelerate.utils.modeling import get_state_dict_offloaded_model

    model = reference()
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    cpu_offload(model, execution_device="cpu", offload_buffers=True)
    assert model.blocks[0].up.weight.device.type == "meta" and model.scale.device.type == "meta"
    state = get_state_dict_offloaded_model(model)
    assert set(state) == set(expected)
    for name, value in state.items():
        assert torch.equal(value, expected[name]), name
    assert model.blocks[0].up.weight.device.type == "meta"  # released again


@pytest.mark.parametrize("safe", [True, False])
def test_sharded_checkpoint_from_save_model_files(tmp_path: Path, safe: bool) -> None:
    from accelerate.storage.model_files import save_model_files

    ref = reference()
    files = save_model_files(ref.state_dict(), tmp_path, max_shard_size="20KB", safe_serialization=safe)
    assert len(files) > 2  # several shards and an index
    model = _empty()
    device_map = {"embed": "cpu", "head": "cpu", "scale": "cpu", "blocks": "disk"}
    load_checkpoint_in_model(
        model, tmp_path, device_map=device_map, offload_folder=tmp_path / "off", strict=True
    )
    assert torch.equal(model.embed.weight, ref.embed.weight) and model.head.weight is model.embed.weight
    assert torch.equal(
        OffloadedWeightsLoader(save_folder=tmp_path / "off")["blocks.5.down.bias"], ref.blocks[5].down.bias
    )


def _flat_index(ref: torch.nn.Module, folder: Path) -> None:
    """Two shards and an index that is the bare name -> file mapping, without a ``weight_map`` key."""
    state = {k: v.contiguous() for k, v in ref.state_dict().items() if k != "head.weight"}
    names = sorted(state)
    halves = {"a.safetensors": names[: len(names) // 2], "b.safetensors": names[len(names) // 2 :]}
    for file, keys in halves.items():
        save_file({k: state[k] for k in keys}, str(folder / file))
    flat = {k: file for file, keys in halves.items() for k in keys}
    (folder / "model.safetensors.index.json").write_text(json.dumps(flat))


def test_an_index_without_weight_map_is_itself_the_weight_map(tmp_path: Path) -> None:
    # Upstream reads ``index["weight_map"]`` when the key is there and the whole index otherwise.
    from accelerate import load_checkpoint_and_dispatch

    ref = reference()
    _flat_index(ref, tmp_path)
    for checkpoint in (tmp_path, tmp_path / "model.safetensors.index.json"):
        model = _empty()
        assert load_checkpoint_in_model(model, checkpoint, strict=True).missing_keys == []
        assert torch.equal(model.blocks[5].down.bias, ref.blocks[5].down.bias)
    device_map = {"embed": "cpu", "head": "cpu", "scale": "cpu", "blocks": "disk"}
    model = load_checkpoint_and_dispatch(
        _empty(), tmp_path, device_map=device_map, offload_folder=tmp_path / "off"
    )
    with torch.no_grad():
        ids = torch.randint(0, 50, (2, 7), generator=torch.Generator().manual_seed(1))
        assert torch.equal(model(ids), ref(ids))


def test_an_index_without_weight_map_or_file_names_names_the_entry(tmp_path: Path) -> None:
    from accelerate.storage.errors import CheckpointError

    save_file({"w": torch.ones(1)}, str(tmp_path / "a.safetensors"))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 4}}))
    with pytest.raises(CheckpointError, match=r"no 'weight_map'.*'metadata'"):
        load_checkpoint_in_model(_empty(), tmp_path)


def test_dtype_holds_for_weights_parked_by_offload_state_dict(tmp_path: Path) -> None:
    # Upstream: weights parked on disk while loading come back in the requested dtype.
    ref = reference()
    _save(ref, tmp_path)
    model = _empty()
    load_checkpoint_in_model(model, tmp_path, device_map={"": "cpu", "blocks.5": "disk"}, dtype=torch.float16,
                             offload_folder=tmp_path / "off", offload_state_dict=True,
                             keep_in_fp32_modules=["norm"])  # fmt: skip
    assert model.blocks[0].up.weight.dtype == torch.float16 and model.embed.weight.dtype == torch.float16
    assert model.blocks[0].norm.weight.dtype == torch.float32
    assert torch.equal(model.blocks[0].up.weight, ref.blocks[0].up.weight.half())
    assert model.scale.dtype == torch.float16 and model.head.weight is model.embed.weight
    assert OffloadedWeightsLoader(save_folder=tmp_path / "off")["blocks.5.up.weight"].dtype == torch.float16
    plain = _empty()
    load_checkpoint_in_model(plain, tmp_path, device_map={"": "cpu", "blocks.5": "disk"}, dtype=torch.float16,
                             offload_folder=tmp_path / "off2", keep_in_fp32_modules=["norm"])  # fmt: skip
    assert {k: v.dtype for k, v in model.state_dict().items()} == {
        k: v.dtype for k, v in plain.state_dict().items()
    }


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _maps_file(tensor: torch.Tensor, path: Path) -> bool:
    """Whether ``tensor``'s memory lies in a mapping of ``path`` (Linux: /proc/self/maps)."""
    address = tensor.data_ptr()
    for line in Path("/proc/self/maps").read_text().splitlines():
        span, *rest = line.split()
        low, high = (int(x, 16) for x in span.split("-"))
        if low <= address < high:
            return rest[-1] == str(path.resolve())
    return False


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/self/maps")
@pytest.mark.parametrize("suffix", ["safetensors", "bin"])
def test_cpu_weights_map_the_file_and_writes_stay_private(tmp_path: Path, suffix: str) -> None:
    """CPU weights in the file's dtype are views of the checkpoint's private (copy-on-write) mapping:
    an optimizer step changes the model, never the file, and a second load sees the original."""
    ref = reference()
    if suffix == "safetensors":
        path = _save(ref, tmp_path)
    else:
        path = tmp_path / "pytorch_model.bin"
        torch.save(ref.state_dict(), path)
    before = _digest(path)
    model = _empty()
    load_checkpoint_in_model(model, path, device_map={"": "cpu"}, strict=True)
    assert _maps_file(model.blocks[0].up.weight, path) and _maps_file(model.embed.weight, path)
    assert model.head.weight is model.embed.weight  # still tied
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.tensor([[1, 2, 3]])).sum().backward()
    optimizer.step()
    assert not torch.equal(model.blocks[0].up.weight, ref.blocks[0].up.weight)  # the model sees the step
    stepped = model.blocks[1].down.bias.detach().clone()
    with torch.no_grad():
        model.blocks[1].down.bias.add_(1.0)
    assert torch.equal(model.blocks[1].down.bias, stepped + 1.0)
    assert _digest(path) == before  # the file does not
    again = _empty()
    load_checkpoint_in_model(again, path, device_map={"": "cpu"})
    assert torch.equal(again.blocks[0].up.weight, ref.blocks[0].up.weight)
    assert torch.equal(again.blocks[1].down.bias, ref.blocks[1].down.bias)


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/self/maps")
def test_cast_weights_get_memory_of_their_own(tmp_path: Path) -> None:
    ref = reference()
    path = _save(ref, tmp_path)
    model = _empty()
    load_checkpoint_in_model(model, path, dtype=torch.float16, keep_in_fp32_modules=["norm"])
    up, norm = model.blocks[0].up.weight, model.blocks[0].norm.weight
    assert up.dtype == torch.float16 and not _maps_file(up, path)
    # keep_in_fp32 weights are already float32 in the file: mapped, no copy.
    assert norm.dtype == torch.float32 and _maps_file(norm, path)
    assert torch.equal(model.blocks[0].norm.weight, ref.blocks[0].norm.weight)


def test_loading_into_a_materialised_model_keeps_its_parameters(tmp_path: Path) -> None:
    ref = reference()
    path = _save(ref, tmp_path)
    model = reference(seed=1)
    weight = model.blocks[2].up.weight
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    load_checkpoint_in_model(model, path, strict=True)
    assert model.blocks[2].up.weight is weight and torch.equal(weight, ref.blocks[2].up.weight)
    assert model.head.weight is model.embed.weight
    assert any(p is weight for group in optimizer.param_groups for p in group["params"])


def test_unaligned_safetensors_tensors_are_read(tmp_path: Path) -> None:
    """The format does not align tensors; one that cannot be viewed in place is read into memory."""
    values = {"odd": torch.arange(3, dtype=torch.uint8), "w": torch.randn(2, 3)}
    blob = values["odd"].numpy().tobytes() + values["w"].numpy().tobytes()
    header = {
        "odd": {"dtype": "U8", "shape": [3], "data_offsets": [0, 3]},
        "w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [3, 27]},
    }
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)  # the data starts 8-aligned, so "w" sits at an odd address
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + blob)

    class Holder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(2, 3))
            self.register_buffer("odd", torch.zeros(3, dtype=torch.uint8))

    holder = Holder()
    load_checkpoint_in_model(holder, tmp_path, strict=True)
    assert torch.equal(holder.w, values["w"]) and torch.equal(holder.odd, values["odd"])


def test_legacy_bin_file_is_read_whole(tmp_path: Path) -> None:
    ref = reference()
    path = tmp_path / "pytorch_model.bin"
    torch.save(ref.state_dict(), path, _use_new_zipfile_serialization=False)  # cannot be memory-mapped
    model = _empty()
    load_checkpoint_in_model(model, path, device_map={"": "cpu"}, strict=True)
    assert torch.equal(model.blocks[3].down.weight, ref.blocks[3].down.weight)
    assert model.head.weight is model.embed.weight


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_gpu_zero_in_the_device_map_is_the_gpu(tmp_path: Path) -> None:
    ref = reference()
    _save(ref, tmp_path)
    model = _empty()
    device_map = {"embed": 0, "head": 0, "scale": 0, "blocks.0": 0, "blocks": "cpu"}
    load_checkpoint_in_model(model, tmp_path, device_map=device_map, strict=True)
    assert model.embed.weight.device == torch.device("cuda", 0) and model.head.weight is model.embed.weight
    assert model.blocks[0].up.weight.device.type == "cuda" and model.blocks[1].up.weight.device.type == "cpu"
    assert torch.equal(model.blocks[0].up.weight.cpu(), ref.blocks[0].up.weight)
