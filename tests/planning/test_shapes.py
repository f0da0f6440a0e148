"""Model shapes read offline: config arithmetic against transformers' own count, safetensors headers, meta models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from accelerate.planning.shapes import (
    ModelShapeError,
    load_model_shape,
    shape_from_config,
    shape_from_safetensors,
    shape_of_module,
)

LLAMA = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 3,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 300, "tie_word_embeddings": False}  # fmt: skip
GPT2 = {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 300, "n_positions": 32}


def _transformers_count(config: dict[str, object]) -> int:
    transformers = pytest.importorskip("transformers")
    built = transformers.AutoConfig.for_model(**config)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(built)
    return sum(p.numel() for p in model.parameters())


def test_a_llama_config_counts_what_transformers_builds() -> None:
    shape = shape_from_config(LLAMA)
    expected = _transformers_count(LLAMA)
    assert shape.parameters == expected
    assert (shape.hidden_size, shape.num_layers, shape.kv_size, shape.intermediate_size) == (64, 3, 32, 160)


def test_a_gpt2_config_counts_within_a_percent() -> None:
    # GPT-2 has biases and learned positions, which the arithmetic leaves out.
    shape = shape_from_config(GPT2)
    expected = _transformers_count(GPT2)
    assert abs(shape.parameters - expected) / expected < 0.05
    assert shape.num_layers == 2 and shape.intermediate_size == 256


def test_a_config_without_dimensions_names_what_is_missing() -> None:
    with pytest.raises(ModelShapeError, match="hidden_size, num_hidden_layers"):
        shape_from_config({"vocab_size": 10}, "cfg.json")


def _save_safetensors(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    from safetensors.torch import save_file

    save_file(tensors, str(path))


def test_a_safetensors_checkpoint_is_read_from_its_header(tmp_path: Path) -> None:
    tensors = {"model.embed_tokens.weight": torch.zeros(50, 8)}
    for layer in range(3):
        tensors[f"model.layers.{layer}.mlp.weight"] = torch.zeros(16, 8)
    _save_safetensors(tmp_path / "model.safetensors", tensors)
    shape = shape_from_safetensors(str(tmp_path / "model.safetensors"))
    assert shape.parameters == 50 * 8 + 3 * 128
    assert (shape.num_layers, shape.hidden_size, shape.vocab_size, shape.largest_layer) == (3, 8, 50, 128)
    assert load_model_shape(str(tmp_path)).parameters == shape.parameters  # a folder of shards


def test_a_folder_with_a_config_is_read_from_the_config(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA))
    assert load_model_shape(str(tmp_path)) == shape_from_config(LLAMA, str(tmp_path))


def build_meta_model() -> torch.nn.Module:
    """A builder for ``module:function`` (what a user's training module would export)."""
    with torch.device("meta"):
        return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ModuleList([torch.nn.Linear(16, 16)] * 2))


def test_a_meta_model_builder_is_called_by_name() -> None:
    shape = load_model_shape(f"{__name__}:build_meta_model")
    assert shape.parameters == 8 * 16 + 16 + 16 * 16 + 16
    assert shape.largest_layer == 16 * 16 + 16 and not shape.knows_activations
    assert shape_of_module(build_meta_model()).parameters == shape.parameters


def test_an_unreadable_source_says_what_it_accepts() -> None:
    with pytest.raises(ModelShapeError, match="config.json, a folder holding one"):
        load_model_shape("no-such-thing.bin")
    with pytest.raises(ModelShapeError, match="no function 'nope'"):
        load_model_shape(f"{__name__}:nope")
