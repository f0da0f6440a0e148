"""SequenceSlicer: each sp rank's slice of a batch, with labels shifted before slicing (no process group)."""

from __future__ import annotations

import pytest
import torch

from accelerate.backends.parallel.sequence import SequenceSlicer


def _batch() -> dict[str, torch.Tensor]:
    ids = torch.arange(16).view(2, 8)
    labels = ids.clone()
    labels[0, :3] = -100
    return {"input_ids": ids, "labels": labels, "attention_mask": torch.ones(2, 8, dtype=torch.long)}


def test_each_rank_gets_its_slice_with_the_next_tokens_as_targets_and_global_positions() -> None:
    first, second = (SequenceSlicer(rank, 2)(_batch()) for rank in (0, 1))
    assert first["input_ids"].tolist() == [[0, 1, 2, 3], [8, 9, 10, 11]]
    # The last token of slice 0 predicts the first of slice 1 (shifted before slicing).
    assert first["shift_labels"].tolist() == [[-100, -100, 3, 4], [9, 10, 11, 12]]
    assert second["shift_labels"].tolist() == [[5, 6, 7, -100], [13, 14, 15, -100]]
    assert torch.equal(
        first["labels"], first["shift_labels"]
    )  # transformers computes a loss only with labels
    assert second["position_ids"].tolist() == [[4, 5, 6, 7]] * 2
    assert (
        int(first["num_items_in_batch"]) == int(second["num_items_in_batch"]) == 14 - 2
    )  # the whole batch's
    assert "attention_mask" not in first  # all ones: causal attention over the whole sequence needs none


def test_given_position_ids_and_other_per_token_tensors_are_sliced_the_rest_pass() -> None:
    batch = {**_batch(), "position_ids": torch.arange(8).flip(0).expand(2, 8), "extra": torch.tensor(7)}
    out = SequenceSlicer(1, 4)(batch)
    assert out["position_ids"].tolist() == [[5, 4]] * 2 and int(out["extra"]) == 7
    assert out["input_ids"].is_contiguous() and out["shift_labels"].is_contiguous()


def test_right_padding_is_dropped_with_the_mask_and_its_targets_stay_ignored() -> None:
    padded = _batch()
    padded["attention_mask"][1, -3:] = 0  # row 1: five real tokens, three pads
    padded["labels"][1, -3:] = -100
    first, second = (SequenceSlicer(rank, 2)(padded) for rank in (0, 1))
    assert "attention_mask" not in first and "attention_mask" not in second
    assert second["shift_labels"][1].tolist() == [-100, -100, -100, -100]  # token 4's target is a pad
    assert int(first["num_items_in_batch"]) == 12 - 3  # the whole batch's real targets


def test_batches_that_cannot_be_sliced_are_errors_saying_what_to_do() -> None:
    with pytest.raises(ValueError, match="length is 8 \\(not divisible by 3\\).*pad_to_multiple_of=3"):
        SequenceSlicer(0, 3)(_batch())
    padded = _batch()
    padded["attention_mask"][0, :2] = 0  # left padding: real tokens would attend to it
    with pytest.raises(ValueError, match="padding before real tokens.*padding_side='right'"):
        SequenceSlicer(0, 2)(padded)
    with pytest.raises(TypeError, match="dict batches with 'input_ids'.*yields tuple"):
        SequenceSlicer(0, 2)((torch.zeros(2, 8),))
