from __future__ import annotations

import pytest

from accelerate.checkpointing import check_checkpointable, parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10GB", 10 * 10**9),
        ("500MB", 500 * 10**6),
        ("1GiB", 2**30),
        ("1.5kb", 1500),
        ("4096", 4096),
        (123, 123),
        (" 2 MiB ", 2 * 2**20),
    ],
)
def test_parse_size(text: int | str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["10 parsecs", "GB", "", "-1GB"])
def test_parse_size_rejects_garbage_with_a_hint(bad: str) -> None:
    with pytest.raises(ValueError, match="10GB"):
        parse_size(bad)


@pytest.mark.parametrize("bad", [0, -5])
def test_parse_size_rejects_non_positive(bad: int) -> None:
    with pytest.raises(ValueError, match="positive"):
        parse_size(bad)


@pytest.mark.parametrize("bad", [True, 1.5, None])
def test_parse_size_rejects_wrong_types(bad: object) -> None:
    with pytest.raises(TypeError):
        parse_size(bad)  # type: ignore[arg-type]


class NoLoad:
    def state_dict(self) -> dict[str, int]:
        return {}


def test_check_checkpointable_names_the_type_and_the_missing_method() -> None:
    with pytest.raises(TypeError, match=r"NoLoad.*load_state_dict"):
        check_checkpointable(NoLoad())
    with pytest.raises(TypeError, match=r"int.*state_dict"):
        check_checkpointable(3)


def test_registering_a_non_stateful_object_is_a_value_error_as_upstream() -> None:
    from accelerate import Accelerator
    from accelerate.checkpointing.objects import NotStatefulError

    accelerator = Accelerator(cpu=True)
    with pytest.raises(ValueError, match="NoLoad") as caught:
        accelerator.register_for_checkpointing(NoLoad())
    assert isinstance(caught.value, NotStatefulError) and isinstance(caught.value, TypeError)
    assert accelerator._custom_objects == []


def test_check_checkpointable_accepts_stateful_objects() -> None:
    import torch

    check_checkpointable(torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1))
