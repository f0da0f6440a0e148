"""Fine-tune a tiny BERT-style classifier on synthetic token sequences.

The task: label-1 sequences draw their tokens from the lower half of the vocabulary, label-0
sequences from the upper half. A small transformer learns this in a couple of epochs, so the loop (prepare, backward, schedule, distributed
eval with ``gather_for_metrics``) is the point, not the model.

    python examples/nlp_example.py
    accelerate launch --cpu --num_processes 2 examples/nlp_example.py
"""

from __future__ import annotations

import argparse
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

from accelerate import Accelerator
from accelerate.utils import set_seed

try:
    from transformers import BertConfig, BertForSequenceClassification
except ImportError:  # the rest of the library does not need transformers; this example does
    sys.exit("examples/nlp_example.py needs transformers: install it with `pip install transformers`.")

FIRST_WORD = 4  # ids below this are "special tokens"; id 1 plays [CLS]


def make_data(num_samples: int, seq_len: int, vocab_size: int, seed: int) -> TensorDataset:
    """Random token ids from one half of the vocabulary per label, after a [CLS]-like first token."""
    gen = torch.Generator().manual_seed(seed)
    half = (vocab_size - FIRST_WORD) // 2
    labels = torch.randint(0, 2, (num_samples,), generator=gen)
    ids = torch.randint(0, half, (num_samples, seq_len), generator=gen) + FIRST_WORD
    ids += half * (1 - labels).unsqueeze(1)  # label 0: upper half
    ids[:, 0] = 1  # the pooler reads the first position
    return TensorDataset(ids, torch.ones_like(ids), labels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--train_samples", type=int, default=512)
    parser.add_argument("--eval_samples", type=int, default=130)  # not a multiple of the batch size
    parser.add_argument("--seq_len", type=int, default=16)
    parser.add_argument("--mixed_precision", default=None, choices=["no", "fp16", "bf16"])
    args = parser.parse_args()

    accelerator = Accelerator(mixed_precision=args.mixed_precision)
    set_seed(0)
    vocab_size = 64
    config = BertConfig(
        vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=args.seq_len, num_labels=2,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    model = BertForSequenceClassification(config)
    train_loader = DataLoader(
        make_data(args.train_samples, args.seq_len, vocab_size, seed=1),
        batch_size=args.batch_size,
        shuffle=True,
    )
    eval_loader = DataLoader(make_data(args.eval_samples, args.seq_len, vocab_size, seed=2), batch_size=32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: max(0.0, 1 - step / (args.epochs * len(train_loader)))
    )
    model, optimizer, train_loader, eval_loader, scheduler = accelerator.prepare(
        model, optimizer, train_loader, eval_loader, scheduler
    )

    for epoch in range(args.epochs):
        model.train()
        for ids, mask, labels in train_loader:
            # transformers models compute the loss themselves when given labels.
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()

        model.eval()
        correct = total = 0
        for ids, mask, labels in eval_loader:
            with torch.no_grad():
                predictions = model(input_ids=ids, attention_mask=mask).logits.argmax(dim=-1)
            # Drops the samples the sampler repeated to even out the last batch across processes.
            predictions, labels = accelerator.gather_for_metrics((predictions, labels))
            correct += int((predictions == labels).sum())
            total += labels.numel()
        accelerator.print(f"epoch {epoch}: eval accuracy {correct / total:.3f} on {total} samples")
    accelerator.print(f"final accuracy {correct / total:.3f}")
    accelerator.end_training()


if __name__ == "__main__":
    main()
