"""What a traced pipeline accepts: the example's shapes, checked on the first process with a clear message."""

from __future__ import annotations

import pytest
import torch

from accelerate.backends.pipeline.inputs import InputSignature, check_divisible, find_pippy_batch_size
from accelerate.utils.imports import is_pippy_available


def test_the_batch_size_is_the_first_tensor_s() -> None:
    assert find_pippy_batch_size((torch.zeros(5, 2),), {}) == 5
    assert find_pippy_batch_size(("text", [torch.zeros(4)]), {"x": torch.zeros(9)}) == 4
    assert find_pippy_batch_size((), {"flag": True, "input_ids": torch.zeros(3, 7)}) == 3
    assert find_pippy_batch_size(None, None) is None


def test_a_batch_must_split_into_equal_micro_batches() -> None:
    assert check_divisible((torch.zeros(8, 2),), {}, 4, "x") == 8
    with pytest.raises(
        ValueError, match=r"batch size of 6, .* num_chunks=4 .* num_chunks from \[1, 2, 3, 6\]"
    ):
        check_divisible((torch.zeros(6, 2),), {}, 4, "This batch")


def test_calls_are_checked_against_the_example() -> None:
    ids = torch.zeros(4, 8, dtype=torch.long)
    signature = InputSignature.of((ids,), {"attention_mask": torch.ones(4, 8), "use_cache": False}, 2)
    assert signature.batch_size == 4
    # Non-tensor keyword inputs were fixed by tracing: left out, or passed unchanged, they are not sent on.
    mask = torch.ones(4, 8)
    assert signature.feed((ids,), {"attention_mask": mask}).keys() == {"attention_mask"}
    assert signature.feed((ids,), {"attention_mask": mask, "use_cache": False}).keys() == {"attention_mask"}
    with pytest.raises(ValueError, match=r"'use_cache' is True, the example's was False"):
        signature.feed((ids,), {"attention_mask": mask, "use_cache": True})
    with pytest.raises(ValueError, match=r"'attention_mask' is missing"):
        signature.feed((ids,), {})
    with pytest.raises(ValueError, match=r"\['labels'\] were not in the example"):
        signature.feed((ids,), {"attention_mask": mask, "labels": ids})
    with pytest.raises(ValueError, match=r"2 positional inputs were passed, the example had 1"):
        signature.feed((ids, ids), {"attention_mask": mask})
    with pytest.raises(
        ValueError, match=r"batch size 4, 2 micro-batches of 2.*input 0 is tensor\[2, 8\].*was tensor\[4, 8\]"
    ):
        signature.feed((ids[:2],), {"attention_mask": mask})


@pytest.mark.skipif(not is_pippy_available(), reason="needs torch.distributed.pipelining")
def test_the_traced_micro_batch_is_the_schedule_s_first_chunk() -> None:
    from accelerate.backends.pipeline.inputs import first_micro_batch

    args, kwargs = first_micro_batch((torch.arange(8).view(8, 1),), {"flag": True}, 4)
    assert args[0].tolist() == [[0], [1]] and kwargs == {"flag": True}


def test_is_pippy_available_answers_without_importing_torch() -> None:
    import subprocess
    import sys

    code = "import sys; from accelerate.utils.imports import is_pippy_available as f; print(f(), 'torch' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == [str(is_pippy_available()), "False"]
