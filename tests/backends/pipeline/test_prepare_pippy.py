"""prepare_pippy on 2 real gloo processes: the pipelined forward matches the plain one, and bad input
raises the same error on every process instead of hanging."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from accelerate.utils.imports import is_pippy_available
from tests.helpers.pool import WorkerPool

pytestmark = pytest.mark.skipif(
    not is_pippy_available(), reason="needs torch.distributed.pipelining (torch >= 2.4)"
)


class Net(nn.Module):
    """A small transformer-like stack: an embedding, four blocks, a head; returns (logits, hidden)."""

    def __init__(self, tuple_output: bool = False) -> None:
        super().__init__()
        self.tuple_output = tuple_output
        self.embed = nn.Linear(4, 16)
        self.layers = nn.ModuleList([nn.Sequential(nn.Linear(16, 16), nn.Tanh()) for _ in range(4)])
        self.head = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> Any:
        hidden = self.embed(x)
        for layer in self.layers:
            hidden = layer(hidden)
        logits = self.head(hidden)
        return (logits, hidden) if self.tuple_output else logits


class Branchy(nn.Module):
    """Data-dependent control flow: torch.export cannot capture it."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x)
        return self.b(h) if h.sum() > 0 else h


def _quiet() -> None:
    # torch's tracer warns about its own deprecated pytree API on every trace.
    warnings.filterwarnings("ignore", category=FutureWarning)


def _net_run(
    split_points: Any, num_chunks: int | None, gather_output: bool, tuple_output: bool
) -> dict[str, Any]:
    from accelerate import PartialState
    from accelerate.inference import prepare_pippy

    _quiet()
    torch.manual_seed(0)
    model = Net(tuple_output).eval()
    batch = torch.randn(8, 4)
    with torch.no_grad():
        expected = model(batch)
    # The example is one micro-batch (as upstream): 8 rows are num_chunks (default: 2) of them.
    model = prepare_pippy(
        model,
        split_points=split_points,
        example_args=(batch[: 8 // (num_chunks or 2)],),
        num_chunks=num_chunks,
        gather_output=gather_output,
    )
    with torch.no_grad():
        first = model(batch)
        again = model(torch.zeros(8, 4) + batch)  # a second batch through the same stages
    if tuple_output:
        # Prepared again (another split, a smaller batch): traced through the model's own forward.
        model = prepare_pippy(model, split_points=["layers.1"], example_args=(batch[:2],), gather_output=True)
        with torch.no_grad():
            redone = model(batch[:4])
        first = (first[0], first[1], redone[0]) if first is not None else None
        expected = (expected[0], expected[1], expected[0][:4])
    state = PartialState()
    diffs = None
    if first is not None:
        got = first if isinstance(first, tuple) else (first,)
        want = expected if isinstance(expected, tuple) else (expected,)
        diffs = [float((g - w).abs().max()) for g, w in zip(got, want, strict=True)] + [
            float((again if isinstance(again, torch.Tensor) else again[0]).sub(want[0]).abs().max())
        ]
        diffs.append(len(got) == len(want))
    return {
        "rank": state.process_index,
        "split_points": model.hf_split_points,
        "diffs": diffs,
        "has_stage": model.pippy_stage is not None,
        "is_tuple": isinstance(first, tuple),
    }


@pytest.mark.parametrize(
    "split_points, num_chunks, gather_output, tuple_output",
    [
        ("auto", None, False, False),
        (["layers.1"], 4, True, False),
        (["layers.3"], 2, True, True),
    ],
    ids=["auto-last-rank-only", "explicit-4-chunks-gathered", "tuple-output-gathered"],
)
def test_pipelined_forward_matches_the_plain_forward(
    pool2: WorkerPool, split_points: Any, num_chunks: int | None, gather_output: bool, tuple_output: bool
) -> None:
    results = pool2.run(_net_run, split_points, num_chunks, gather_output, tuple_output, timeout=240)
    assert results[0]["split_points"] == results[1]["split_points"]
    if split_points == "auto":
        # Six blocks' worth of weights (embed, 4 layers, head): the even cut is inside the layers.
        assert results[0]["split_points"][0].startswith("layers.")
    else:
        assert results[0]["split_points"] == (["layers.1"] if tuple_output else split_points)
    last = results[1]
    assert last["diffs"] is not None and last["diffs"][-1] is True
    assert max(last["diffs"][:-1]) <= 1e-6
    if gather_output:
        assert results[0]["diffs"] == last["diffs"]  # the same output reached the first process
    else:
        assert results[0]["diffs"] is None  # upstream: only the last process gets the output
    assert last["is_tuple"] is tuple_output
    assert all(r["has_stage"] for r in results)


def _micro_batch_run() -> dict[str, Any]:
    """Upstream's meaning: the example is ONE micro-batch; a call's batch is num_chunks of them."""
    from accelerate import PartialState
    from accelerate.inference import prepare_pippy

    _quiet()
    torch.manual_seed(0)
    model = Net().eval()
    batch = torch.randn(4, 4)
    with torch.no_grad():
        expected = model(batch)
    # A micro-batch of 2; num_chunks defaults to the 2 processes: batches of up to 2 x 2 rows.
    model = prepare_pippy(model, split_points=["layers.2"], example_args=(batch[:2],), gather_output=True)
    results: dict[str, Any] = {"rank": PartialState().process_index}
    with torch.no_grad():
        for rows in (4, 3, 1):  # 3 and 1 are padded to 4, and the padding is dropped from the output
            output = model(batch[:rows])
            results[f"shape{rows}"] = list(output.shape)
            results[f"diff{rows}"] = float((output - expected[:rows]).abs().max())
        for name, bad in {"too_big": torch.randn(5, 4), "wrong_width": torch.randn(4, 5)}.items():
            try:
                model(bad)
            except ValueError as exc:
                results[name] = str(exc)
            else:
                results[name] = "no error"
    return results


def test_the_example_is_one_micro_batch_and_short_batches_are_padded(pool2: WorkerPool) -> None:
    results = pool2.run(_micro_batch_run, timeout=240)
    for result in results:
        assert [result[f"shape{rows}"] for rows in (4, 3, 1)] == [[4, 3], [3, 3], [1, 3]], result
        assert max(result[f"diff{rows}"] for rows in (4, 3, 1)) <= 1e-6, result
        assert "batch size 5" in result["too_big"] and "2 micro-batches of 2" in result["too_big"], result
        assert "tensor[4, 5]" in result["wrong_width"] and "tensor[2, 4]" in result["wrong_width"], result


def _errors_on_bad_input() -> dict[str, str]:
    """Each bad call, caught on this rank: every case must raise here (a case that hung fails the test)."""
    from accelerate import PartialState
    from accelerate.inference import prepare_pippy

    _quiet()
    rank = PartialState().process_index
    batch = torch.randn(8, 4)
    cases: dict[str, Any] = {
        "unknown": lambda: prepare_pippy(Net(), split_points=["layers.9", "nope"], example_args=(batch,)),
        "too_many": lambda: prepare_pippy(
            Net(), split_points=["layers.1", "layers.2"], example_args=(batch,)
        ),
        "no_example": lambda: prepare_pippy(Net()),
        "disagree": lambda: prepare_pippy(Net(), split_points=[f"layers.{rank + 1}"], example_args=(batch,)),
        "one_rank": lambda: prepare_pippy(
            Net(), split_points=["bogus" if rank else "layers.2"], example_args=(batch,)
        ),
        "untraceable": lambda: prepare_pippy(Branchy(), split_points=["b"], example_args=(batch,)),
    }
    messages: dict[str, str] = {}
    for name, call in cases.items():
        try:
            call()
        except (ValueError, RuntimeError) as exc:
            messages[name] = f"{type(exc).__name__}: {exc}"
        else:
            messages[name] = "no error"
    model = prepare_pippy(Net().eval(), split_points=["layers.2"], example_args=(batch,))
    calls = {
        "too_big": (torch.randn(17, 4),),
        "wrong_batch": (torch.randn(6, 5),),
        "wrong_dtype": (batch.double(),),
    }
    for name, inputs in calls.items():
        try:
            with torch.no_grad():
                model(*inputs)
        except ValueError as exc:
            messages[name] = f"{type(exc).__name__}: {exc}"
        else:
            messages[name] = "no error"
    return messages


def test_bad_input_raises_on_every_process(pool2: WorkerPool) -> None:
    results = pool2.run(_errors_on_bad_input, timeout=300)
    for rank, messages in enumerate(results):
        assert "no error" not in messages.values(), (rank, messages)
        assert re.search(
            r"\['layers\.9', 'nope'\] are not modules of Net.*\['embed', 'layers', 'head'\]",
            messages["unknown"],
        )
        assert "2 split points give 3 stages, more than the 2 processes" in messages["too_many"]
        assert "pass exactly 1 split point(s)" in messages["too_many"]
        assert "needs example inputs" in messages["no_example"] and "example_args" in messages["no_example"]
        assert "2 micro-batches of 8 rows" in messages["too_big"]
        assert "its batch size 17 is more than 16" in messages["too_big"]
        assert "called differently on the processes" in messages["disagree"]
        assert "rank 0: split_points=['layers.1']" in messages["disagree"]
        assert "rank 1: split_points=['layers.2']" in messages["disagree"]
        assert (
            messages["untraceable"].startswith("RuntimeError")
            and "could not trace Branchy" in messages["untraceable"]
        )
        assert "tensor[6, 5] (torch.float32), expected tensor[6, 4]" in messages["wrong_batch"]
        assert "like its example (tensor[8, 4]" in messages["wrong_batch"]
        assert "torch.float64" in messages["wrong_dtype"]
    # A mistake made on one process only: that process raises it, the other names it.
    assert results[1]["one_rank"].startswith("ValueError: split_points ['bogus'] are not modules")
    assert results[0]["one_rank"].startswith(
        "ValueError: prepare_pippy failed on rank 1 (rank 1: ValueError: split_points"
    )


def _gpt2_run() -> dict[str, Any]:
    from transformers import GPT2Config, GPT2LMHeadModel

    from accelerate import PartialState
    from accelerate.inference import prepare_pippy

    _quiet()
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=32)
    model = GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, 100, (4, 8))
    with torch.no_grad():
        expected = model(ids, use_cache=False).logits
    try:
        model = prepare_pippy(
            model,
            example_args=(ids[:2],),  # one micro-batch: calls take 2 of them
            example_kwargs={"use_cache": False},
            no_split_module_classes=model._no_split_modules,
            gather_output=True,
        )
    except RuntimeError as exc:
        return {"skip": str(exc)}
    with torch.no_grad():
        output = model(ids)
    logits = output if isinstance(output, torch.Tensor) else output[0]
    return {
        "rank": PartialState().process_index,
        "diff": float((logits - expected).abs().max()),
        "split_points": model.hf_split_points,
        "vocab": model.config.vocab_size,
    }


def test_tiny_gpt2_from_config(pool2: WorkerPool) -> None:
    pytest.importorskip("transformers")
    results = pool2.run(_gpt2_run, timeout=300)
    if "skip" in results[0]:
        pytest.skip(f"torch's tracer cannot capture GPT-2 here: {results[0]['skip']}")
    assert results[0]["split_points"] == results[1]["split_points"] == ["transformer.h.1"]
    assert all(r["diff"] <= 1e-6 for r in results)
    assert all(r["vocab"] == 100 for r in results)  # the model's attributes stay reachable


def test_a_single_process_is_told_how_to_launch() -> None:
    from accelerate.inference import prepare_pippy

    with pytest.raises(ValueError, match=r"this run has 1: launch one process per stage.*accelerate launch"):
        prepare_pippy(Net(), example_args=(torch.randn(2, 4),))


@pytest.mark.multi_gpu
def test_two_gpus_over_nccl(tmp_path: Path) -> None:
    from tests.commands.helpers import reserved_port, run_cli

    script = Path(__file__).resolve().parents[1] / "scripts" / "pippy_two_gpus.py"
    with reserved_port() as port:
        result = run_cli("launch", "--num_processes", "2", "--main_process_port", str(port), str(script),
                         str(tmp_path), home=tmp_path, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    rows = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    for rank, row in enumerate(rows):
        assert (row["rank"], row["backend"], row["device"]) == (rank, "nccl", f"cuda:{rank}")
        assert row["max_diff"] <= 1e-5  # TF32 may be on for CUDA matmuls
        assert row["split_points"] == rows[0]["split_points"]
