"""TRL as a real client: its SFTTrainer and DPOTrainer train a tiny Llama (built from a config, with a
word-level tokenizer made here: no Hub) through our Accelerator on CPU."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("trl")
pytest.importorskip("datasets")

from datasets import Dataset  # noqa: E402
from tokenizers import Tokenizer, models, pre_tokenizers  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast  # noqa: E402

import accelerate  # noqa: E402

WORDS = ["<pad>", "<eos>", "<unk>"] + [f"w{i}" for i in range(29)]


def _tokenizer() -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.WordLevel({word: i for i, word in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )


def _tiny_llama() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(WORDS), hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=32, pad_token_id=0, eos_token_id=1, bos_token_id=1,
    )  # fmt: skip
    return LlamaForCausalLM(config)


def _common(tmp_path: Path) -> dict[str, Any]:
    return {
        "output_dir": str(tmp_path), "per_device_train_batch_size": 4, "learning_rate": 1e-2, "logging_steps": 1,
        "report_to": [], "use_cpu": True, "save_strategy": "no", "disable_tqdm": True, "seed": 42,
    }  # fmt: skip


def _losses(trainer: Any) -> list[float]:
    return [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]


def test_sft_trainer_trains_through_our_accelerator(tmp_path: Path) -> None:
    from trl import SFTConfig, SFTTrainer

    # Sequences that continue w_s, w_s+1, ...: the next token is learnable.
    texts = [" ".join(f"w{(start + k) % 29}" for k in range(6)) for start in range(32)]
    trainer = SFTTrainer(
        model=_tiny_llama(),
        args=SFTConfig(max_steps=4, max_length=16, **_common(tmp_path)),
        train_dataset=Dataset.from_dict({"text": texts}),
        processing_class=_tokenizer(),
    )
    assert isinstance(trainer.accelerator, accelerate.Accelerator)
    assert Path(accelerate.__file__).parent == Path(__file__).parents[2] / "src" / "accelerate"
    trainer.train()
    losses = _losses(trainer)
    assert len(losses) == 4 and losses[-1] < losses[0]


def test_dpo_trainer_prefers_the_chosen_answers(tmp_path: Path) -> None:
    from trl import DPOConfig, DPOTrainer

    model = _tiny_llama()
    reference = copy.deepcopy(model)
    frozen = copy.deepcopy(reference.state_dict())
    pairs = {
        "prompt": [f"w{s} w{s + 1}" for s in range(16)],
        "chosen": [f" w{s + 2} w{s + 3}" for s in range(16)],
        "rejected": [f" w{(s * 7) % 29} w{(s * 5) % 29}" for s in range(16)],
    }
    trainer = DPOTrainer(
        model=model,
        ref_model=reference,
        args=DPOConfig(max_steps=3, beta=0.1, **_common(tmp_path)),
        train_dataset=Dataset.from_dict(pairs),
        processing_class=_tokenizer(),
    )
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    # The DPO loss starts at log(2) (policy == reference) and falls as the chosen answers gain on the rejected.
    assert logs[0]["loss"] == pytest.approx(0.6931, abs=1e-3)
    assert logs[-1]["loss"] < logs[0]["loss"] and logs[-1]["rewards/margins"] > 0
    # The reference model (prepared by TRL through our Accelerator for evaluation) did not move.
    assert all(torch.equal(frozen[k], v) for k, v in reference.state_dict().items())
    assert any(not torch.equal(frozen[k], v) for k, v in model.state_dict().items())
