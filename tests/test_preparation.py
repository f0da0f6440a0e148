"""``preparation.prepare_all`` without an Accelerator: the facade's per-kind preparation is handed in
(``Preparers``), the run's values in a ``PrepareContext``, so the ordering is tested on its own."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from accelerate.backends.base import JointPreparation, PrepareContext, Strategy
from accelerate.backends.registry import Prepared
from accelerate.preparation import Preparers, mark_prepared, placements_for, prepare_all


class _Precision:
    """The one precision call prepare_all makes itself (fp8 with MS-AMP prepares model+optimizer)."""

    def prepare_jointly(self, objects: list[Any]) -> list[Any]:
        return objects


def _context(prepared: Prepared, calls: list[str]) -> PrepareContext:
    def loader(obj: Any, placement: bool | None) -> Any:
        calls.append(f"dataloader:{placement}")
        prepared.dataloaders.append(obj)
        return obj

    return PrepareContext(
        num_processes=1, split_batches=False, gradient_accumulation_steps=1, precision=_Precision(),  # type: ignore[arg-type]
        dynamo_plugin=None, prepare_data_loader=loader, prepared=prepared,
    )  # fmt: skip


def _preparers(prepared: Prepared, calls: list[str]) -> Preparers:
    def kind(name: str, into: list[Any]) -> Any:
        def prepare(obj: Any, placement: bool | None = None) -> Any:
            calls.append(f"{name}:{placement}")
            into.append(obj)
            return obj

        return prepare

    def register(**made: Any) -> None:
        calls.append(f"register:{sorted(made)}")

    return Preparers(
        model=kind("model", prepared.models),
        optimizer=kind("optimizer", prepared.optimizers),
        scheduler=kind("scheduler", prepared.schedulers),
        register=register,
    )


def test_objects_are_prepared_by_kind_in_order_and_come_back_in_the_callers_order() -> None:
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1)
    loader = torch.utils.data.DataLoader(list(range(4)))
    prepared, calls = Prepared(), []
    objects = [scheduler, loader, "other", optimizer, model]
    results = prepare_all(
        objects, [None, False, None, True, None], _preparers(prepared, calls), Strategy(torch.device("cpu")),
        _context(prepared, calls),
    )  # fmt: skip
    assert results == objects
    assert calls == ["model:None", "optimizer:True", "dataloader:False", "scheduler:None"]
    assert all(
        getattr(obj, "_is_accelerate_prepared", False) for obj in (model, optimizer, scheduler, loader)
    )


def test_a_joint_strategy_gets_the_context_and_the_facade_registers_what_it_made() -> None:
    class Joint(Strategy):
        prepares_jointly = True

        def prepare_jointly(
            self, objects: list[Any], placements: list[bool | None], context: PrepareContext
        ) -> JointPreparation:
            seen.append(context)
            return JointPreparation(list(objects), models=[objects[0]])

    seen: list[PrepareContext] = []
    prepared, calls = Prepared(), []
    context = _context(prepared, calls)
    model = torch.nn.Linear(2, 2)
    assert prepare_all([model], [None], _preparers(prepared, calls), Joint(torch.device("cpu")), context) == [
        model
    ]
    assert seen == [context]
    assert calls == ["register:['models', 'optimizers', 'schedulers']"]


def test_the_context_is_frozen() -> None:
    context = _context(Prepared(), [])
    with pytest.raises(AttributeError):
        context.num_processes = 2  # type: ignore[misc]


def test_placements_need_one_entry_per_object() -> None:
    assert placements_for(2, None) == [None, None]
    assert placements_for(2, [True, False]) == [True, False]
    with pytest.raises(ValueError, match=r"device_placement=.*got 1 entries for 2 objects"):
        placements_for(2, [True])


def test_mark_prepared_marks_only_what_the_registry_holds() -> None:
    prepared = Prepared()
    kept, passed = torch.nn.Linear(1, 1), torch.nn.Linear(1, 1)
    prepared.models.append(kept)
    mark_prepared(prepared, [kept, passed])
    assert kept._is_accelerate_prepared is True
    assert not hasattr(passed, "_is_accelerate_prepared")
