"""transformers' Trainer under DeepSpeed ZeRO-2 on CPU with ``gradient_accumulation_steps: 2`` in the config.

The Trainer always builds its Accelerator with ``GradientAccumulationPlugin(num_steps=1)``; the
DeepSpeed config's value must win. Run under ``torchrun`` with ``DS_ACCELERATOR=cpu``; prints one
JSON line on the main process.

Usage: trainer_deepspeed_run.py OUTPUT_DIR
"""

from __future__ import annotations

import json
import sys

import torch
from transformers import Trainer, TrainingArguments

from tests.clients.trainer_run import Synthetic, tiny_bert

DS_CONFIG = {
    "train_micro_batch_size_per_gpu": "auto",
    "train_batch_size": "auto",
    "gradient_accumulation_steps": 2,
    "gradient_clipping": "auto",
    "zero_optimization": {"stage": 2},
}


def main() -> None:
    output_dir = sys.argv[1]
    args = TrainingArguments(
        output_dir=output_dir,
        max_steps=4,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        learning_rate=5e-3,
        save_strategy="no",
        eval_strategy="no",
        logging_steps=1,
        report_to=[],
        seed=7,
        dataloader_num_workers=0,
        disable_tqdm=True,
        average_tokens_across_devices=False,
        deepspeed=DS_CONFIG,
    )
    model = tiny_bert()
    before = torch.cat([p.detach().float().flatten() for p in model.parameters()])
    trainer = Trainer(model=model, args=args, train_dataset=Synthetic(48, seed=1))
    result = trainer.train()
    engine = trainer.model_wrapped
    after = torch.cat(
        [p.detach().float().flatten() for p in trainer.accelerator.unwrap_model(trainer.model).parameters()]
    )
    report = {
        "world_size": trainer.args.world_size,
        "distributed_type": trainer.accelerator.distributed_type.value,
        "global_step": result.global_step,
        "engine_gas": engine.gradient_accumulation_steps(),
        "engine_global_steps": engine.global_steps,
        "accelerator_gas": trainer.accelerator.gradient_accumulation_steps,
        "losses": [entry["loss"] for entry in trainer.state.log_history if "loss" in entry],
        "changed": bool((after - before).abs().max() > 0),
    }
    if trainer.is_world_process_zero():
        print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
