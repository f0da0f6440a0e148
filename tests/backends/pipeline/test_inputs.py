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


def test_calls_are_checked_against_the_example_micro_batch() -> None:
    ids = torch.ones(4, 8, dtype=torch.long)
    signature = InputSignature.of((ids,), {"attention_mask": torch.ones(4, 8), "use_cache": False}, 2)
    assert (signature.batch_size, signature.full_batch) == (4, 8)  # the example is one micro-batch
    # Non-tensor keyword inputs were fixed by tracing: left out, or passed unchanged, they are not sent on.
    mask = torch.ones(8, 8)
    full = torch.ones(8, 8, dtype=torch.long)
    assert signature.feed((full,), {"attention_mask": mask})[1].keys() == {"attention_mask"}
    assert signature.feed((full,), {"attention_mask": mask, "use_cache": False})[1].keys() == {
        "attention_mask"
    }
    with pytest.raises(ValueError, match=r"'use_cache' is True, expected False"):
        signature.feed((full,), {"attention_mask": mask, "use_cache": True})
    with pytest.raises(ValueError, match=r"'attention_mask' is missing"):
        signature.feed((full,), {})
    with pytest.raises(ValueError, match=r"\['labels'\] were not in the example"):
        signature.feed((full,), {"attention_mask": mask, "labels": full})
    with pytest.raises(ValueError, match=r"2 positional inputs were passed, the example had 1"):
        signature.feed((full, full), {"attention_mask": mask})
    differs = r"2 micro-batches of 4 rows.*'attention_mask' is tensor\[8, 8\] \(torch.float32\), expected tensor\[2, 8\]"
    with pytest.raises(ValueError, match=differs):
        signature.feed((full[:2],), {"attention_mask": mask})
    with pytest.raises(ValueError, match=r"its batch size 9 is more than 8"):
        signature.feed((torch.ones(9, 8, dtype=torch.long),), {"attention_mask": torch.ones(9, 8)})


def test_a_short_batch_is_padded_with_zero_rows_that_the_output_drops() -> None:
    from accelerate.backends.pipeline.inputs import drop_padding

    signature = InputSignature.of((torch.ones(2, 3),), {"mask": torch.ones(2, 3)}, 2)
    args, kwargs, rows = signature.feed((torch.ones(3, 3),), {"mask": torch.ones(3, 3)})
    assert rows == 3 and args[0].shape == kwargs["mask"].shape == (4, 3)
    assert args[0][:3].eq(1).all() and args[0][3].eq(0).all()
    output = (torch.arange(8).view(4, 2), torch.zeros(()))
    trimmed = drop_padding(output, 3, 4)
    assert trimmed[0].shape == (3, 2) and trimmed[1].shape == ()


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
