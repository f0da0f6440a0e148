"""A transformers Trainer run on a tiny BERT built from a config, with synthetic data (no Hub).

Run directly (one process), under ``accelerate launch --cpu --num_processes 2`` or under ``torchrun``.
``--lora`` trains a peft LoRA adapter on the BERT instead of the whole model.

Trains without interruption, then trains again in a fresh Trainer resumed from the first run's
``checkpoint-2``; then evaluates with the first Trainer again (a second Trainer's Accelerator reset the
process state in between, as transformers does); prints the results (one JSON line, main process).

Usage: trainer_run.py OUTPUT_DIR MAX_STEPS [--bf16] [--accumulation K] [--lora]
"""

from __future__ import annotations

import argparse
import json
import os

import torch
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

SEQ, VOCAB, SAMPLES = 8, 64, 48


class Synthetic(Dataset[dict[str, torch.Tensor]]):
    """Token ids and a label that depends on them, so the loss can fall."""

    def __init__(self, n: int, seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(1, VOCAB, (n, SEQ), generator=gen)
        self.labels = (self.ids[:, 0] > VOCAB // 2).long()

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {
            "input_ids": self.ids[i],
            "attention_mask": torch.ones(SEQ, dtype=torch.long),
            "labels": self.labels[i],
        }


def tiny_bert() -> BertForSequenceClassification:
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=SEQ, num_labels=2,
    )  # fmt: skip
    return BertForSequenceClassification(config)


def run(
    output_dir: str, args: argparse.Namespace, resume: str | None = None
) -> tuple[dict[str, object], Trainer]:
    """Trains (resuming from ``resume`` if given), evaluates and saves; returns what to compare and the Trainer."""
    training_args = TrainingArguments(
        output_dir=output_dir,
        max_steps=args.max_steps,
        per_device_train_batch_size=4,
        per_device_eval_batch_size=4,
        gradient_accumulation_steps=args.accumulation,
        learning_rate=5e-3,
        lr_scheduler_type="linear",
        warmup_steps=1,
        save_strategy="steps",
        save_steps=2,
        eval_strategy="no",
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        bf16=args.bf16,
        seed=7,
        dataloader_num_workers=0,
        disable_tqdm=True,
        # BERT's loss ignores num_items_in_batch; without this transformers multiplies it by the world size.
        average_tokens_across_devices=False,
    )  # fmt: skip
    model = tiny_bert()
    if args.lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(
            model, LoraConfig(task_type="SEQ_CLS", r=4, lora_alpha=8, target_modules=["query", "value"])
        )
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=Synthetic(SAMPLES, seed=1),
        eval_dataset=Synthetic(13, seed=2),
    )
    result = trainer.train(resume_from_checkpoint=resume)
    metrics = trainer.evaluate()
    trainer.save_model(os.path.join(output_dir, "final"))
    is_main = trainer.is_world_process_zero()
    params = torch.cat([p.detach().float().flatten() for p in trainer.model.parameters()])
    return {
        "world_size": trainer.args.world_size,
        "mixed_precision": trainer.accelerator.mixed_precision,
        "distributed_type": trainer.accelerator.distributed_type.value,
        "global_step": result.global_step,
        "losses": [entry["loss"] for entry in trainer.state.log_history if "loss" in entry],
        "eval_loss": metrics["eval_loss"],
        "eval_samples": metrics.get("eval_samples"),
        "params": params.tolist(),
        "trainable": sorted(n for n, p in trainer.model.named_parameters() if p.requires_grad),
        # save_model writes on the main process only: the other ranks do not wait for it.
        "checkpoints": sorted(d for d in os.listdir(output_dir) if d.startswith("checkpoint-"))
        if is_main
        else [],
        "final_files": sorted(os.listdir(os.path.join(output_dir, "final"))) if is_main else [],
        "is_main": is_main,
    }, trainer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("output_dir")
    parser.add_argument("max_steps", type=int)
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--accumulation", type=int, default=1)
    parser.add_argument("--lora", action="store_true")
    args = parser.parse_args()

    # An uninterrupted run, then a fresh Trainer resuming from its first checkpoint.
    full, first = run(os.path.join(args.output_dir, "full"), args)
    resumed, _ = run(
        os.path.join(args.output_dir, "resumed"),
        args,
        resume=os.path.join(args.output_dir, "full", "checkpoint-2"),
    )
    # The first Trainer is used again after the second one was built (a second Accelerator reset the
    # process state under it): as with upstream, it reads the current state and evaluates as before.
    full["eval_loss_after_second_trainer"] = first.evaluate()["eval_loss"]
    if full["is_main"]:
        print(json.dumps({"full": full, "resumed": resumed}), flush=True)


if __name__ == "__main__":
    main()
