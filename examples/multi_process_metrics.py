"""Computing a metric over an evaluation set split across processes.

Each process evaluates its shard; ``gather_for_metrics`` collects the predictions of all of them
and drops the samples the sampler repeated so that every process got the same number of batches.
The metric then counts every sample exactly once, as on one process. Non-tensor results (here
strings) go through ``use_gather_object=True``.

    accelerate launch --cpu --num_processes 2 examples/multi_process_metrics.py
"""

from __future__ import annotations

import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset

from accelerate import Accelerator
from accelerate.utils import set_seed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--eval_samples", type=int, default=101)  # odd: the last batch is uneven
    parser.add_argument("--batch_size", type=int, default=16)
    args = parser.parse_args()

    accelerator = Accelerator()
    set_seed(0)
    gen = torch.Generator().manual_seed(1)
    features = torch.randn(args.eval_samples, 5, generator=gen)
    labels = torch.randint(0, 3, (args.eval_samples,), generator=gen)
    dataset = TensorDataset(features, labels)
    model = torch.nn.Linear(5, 3)  # untrained: the metric's bookkeeping is the point, not its value
    loader = DataLoader(dataset, batch_size=args.batch_size)
    model, loader = accelerator.prepare(model, loader)

    model.eval()
    correct = seen = 0
    records: list[str] = []
    for x, y in loader:
        with torch.no_grad():
            predictions = model(x).argmax(dim=-1)
        # Python objects too, e.g. per-sample records for a results file; gathered before the
        # tensors are replaced by their gathered versions below.
        local = [f"predicted {int(p)}, label {int(t)}" for p, t in zip(predictions, y, strict=True)]
        records += accelerator.gather_for_metrics(local, use_gather_object=True)
        predictions, y = accelerator.gather_for_metrics((predictions, y))
        correct += int((predictions == y).sum())
        seen += y.numel()
    accelerator.print(
        f"distributed accuracy {correct / seen:.6f} over {seen} samples, {len(records)} records"
    )

    if accelerator.is_main_process:
        # The same metric on one process over the whole set, for comparison.
        with torch.no_grad():
            reference = accelerator.unwrap_model(model)(features).argmax(dim=-1)
        print(
            f"single-process accuracy {float((reference == labels).float().mean()):.6f} over {len(labels)} samples"
        )
    accelerator.end_training()


if __name__ == "__main__":
    main()
