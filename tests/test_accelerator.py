from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from accelerate import Accelerator, DistributedType
from accelerate.optimizer import AcceleratedOptimizer
from accelerate.scheduler import AcceleratedScheduler
from accelerate.state import PartialState
from accelerate.utils import (
    DistributedDataParallelKwargs,
    GradientAccumulationPlugin,
    InitProcessGroupKwargs,
    ProjectConfiguration,
)
from tests.helpers.pool import WorkerPool
from tests.training_helpers import flat_params, global_batches, local_rows, make_model


def test_prepare_keeps_order_and_passes_others_through() -> None:
    accelerator = Accelerator()
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    marker = object()
    out = accelerator.prepare(scheduler, marker, optimizer, model)
    assert isinstance(out[0], AcceleratedScheduler)
    assert out[1] is marker
    assert isinstance(out[2], AcceleratedOptimizer)
    assert isinstance(out[3], torch.nn.Module)
    alone = accelerator.prepare(make_model())
    assert isinstance(alone, torch.nn.Module)  # one object comes back alone, not in a tuple
    assert accelerator.prepare(None) is None  # scripts pass scheduler=None; it passes through
    assert accelerator.prepare(model, None)[1] is None


@pytest.mark.parametrize(
    ("cls", "what"),
    [
        (torch.nn.Linear, "not a model"),
        (torch.optim.SGD, "not an optimizer"),
        (torch.utils.data.DataLoader, "not a dataloader"),
        (torch.optim.lr_scheduler.StepLR, "not a scheduler"),
    ],
)
def test_prepare_names_a_class_passed_for_an_instance(cls: type, what: str) -> None:
    accelerator = Accelerator()
    with pytest.raises(
        TypeError, match=rf"argument 2 is the class .*{cls.__qualname__}, {what}: pass an instance"
    ):
        accelerator.prepare(make_model(), cls)


def test_the_single_object_prepare_methods_name_a_class_too() -> None:
    accelerator = Accelerator()
    calls = [
        (accelerator.prepare_model, torch.nn.Linear, "prepare_model\\(\\) argument 'model'"),
        (accelerator.prepare_optimizer, torch.optim.SGD, "prepare_optimizer\\(\\) argument 'optimizer'"),
        (
            accelerator.prepare_scheduler,
            torch.optim.lr_scheduler.StepLR,
            "prepare_scheduler\\(\\) argument 'scheduler'",
        ),
        (
            accelerator.prepare_data_loader,
            torch.utils.data.DataLoader,
            "prepare_data_loader\\(\\) argument 'data_loader'",
        ),
    ]
    for method, cls, argument in calls:
        with pytest.raises(
            TypeError, match=rf"{argument} is the class .*{cls.__qualname__}, not .*: pass an instance"
        ):
            method(cls)


def test_optimizer_created_before_prepare_trains_prepared_parameters() -> None:
    accelerator = Accelerator()
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    prepared = list(accelerator.unwrap_model(model).parameters())
    assert all(any(p is q for q in prepared) for p in optimizer.param_groups[0]["params"])
    before = flat_params(model)
    accelerator.backward(model(torch.ones(2, 8)).sum())
    optimizer.step()
    assert not torch.equal(before, flat_params(model))


def test_remap_follows_replaced_parameters() -> None:
    from accelerate.preparation import remap_optimizer_params

    model = make_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.ones(1, 8)).sum().backward()
    optimizer.step()
    old = list(model.parameters())
    new = [torch.nn.Parameter(p.detach().clone()) for p in old]
    remap_optimizer_params(optimizer, {id(o): n for o, n in zip(old, new, strict=True)})
    assert all(a is b for a, b in zip(optimizer.param_groups[0]["params"], new, strict=True))
    assert all(p in optimizer.state for p in new)


def test_device_and_type_single_process() -> None:
    accelerator = Accelerator(cpu=True)
    assert accelerator.device.type == "cpu"
    assert accelerator.distributed_type is DistributedType.NO
    assert accelerator.num_processes == 1 and accelerator.is_main_process


def test_unknown_kwargs_handler_raises() -> None:
    with pytest.raises(TypeError, match="dict, which is not a kwargs handler"):
        Accelerator(kwargs_handlers=[{"find_unused_parameters": True}])


def test_duplicate_kwargs_handler_raises() -> None:
    with pytest.raises(ValueError, match="two DistributedDataParallelKwargs"):
        Accelerator(
            kwargs_handlers=[
                DistributedDataParallelKwargs(),
                DistributedDataParallelKwargs(static_graph=True),
            ]
        )


def test_second_accelerator_with_contradicting_precision_raises() -> None:
    Accelerator(mixed_precision="bf16")
    with pytest.raises(ValueError, match="mixed_precision='bf16'.*'fp16'"):
        Accelerator(mixed_precision="fp16")
    Accelerator(mixed_precision="bf16")  # agreeing is fine


def test_second_default_accelerator_reuses_an_fp16_state(monkeypatch: pytest.MonkeyPatch) -> None:
    # As upstream: a later Accelerator() that names no precision re-uses the process's state (the
    # launcher's setting is not read again); naming a different one raises.
    first = Accelerator(mixed_precision="fp16")
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "no")
    second = Accelerator()
    assert second.state is first.state
    assert second.mixed_precision == "fp16" and second.scaler is not None
    assert Accelerator(mixed_precision="fp16").mixed_precision == "fp16"
    for other in ("no", "bf16"):
        with pytest.raises(ValueError, match=f"'fp16'.*mixed_precision='{other}'"):
            Accelerator(mixed_precision=other)


def test_plugin_and_steps_together_raise() -> None:
    with pytest.raises(ValueError, match="gradient_accumulation_steps=2"):
        Accelerator(
            gradient_accumulation_steps=2,
            gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps=2),
        )


def test_backend_plugins_of_the_wrong_type_raise_clearly() -> None:
    # FSDP and DeepSpeed run (tests/backends/fsdp/, tests/backends/deepspeed/); Megatron-LM needs GPUs.
    with pytest.raises(TypeError, match="needs a FullyShardedDataParallelPlugin, got object"):
        Accelerator(fsdp_plugin=object())
    with pytest.raises(TypeError, match="pass a DeepSpeedPlugin"):
        Accelerator(deepspeed_plugin=object())
    with pytest.raises(NotImplementedError, match="megatron_lm_plugin.*not available yet"):
        Accelerator(megatron_lm_plugin=object())


def test_project_dir_fills_in_a_project_config_without_one() -> None:
    config = ProjectConfiguration(automatic_checkpoint_naming=True, total_limit=2)
    accelerator = Accelerator(cpu=True, project_dir="runs/a", project_config=config)
    assert accelerator.project_configuration is config
    assert (accelerator.project_dir, accelerator.logging_dir) == ("runs/a", "runs/a")
    assert config.automatic_checkpoint_naming and config.total_limit == 2
    kept = ProjectConfiguration(project_dir="runs/b", logging_dir="logs")
    accelerator = Accelerator(
        cpu=True, project_dir="runs/a", project_config=kept
    )  # upstream: the config wins
    assert (accelerator.project_dir, accelerator.logging_dir) == ("runs/b", "logs")
    with_logs = ProjectConfiguration(logging_dir="logs")
    assert Accelerator(cpu=True, project_dir="runs/c", project_config=with_logs).logging_dir == "logs"


def test_unwrap_model_through_compile() -> None:
    accelerator = Accelerator()
    model = make_model()
    compiled = torch.compile(model, backend="eager")
    assert accelerator.unwrap_model(compiled, keep_torch_compile=False) is model


def test_launcher_env_sets_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    monkeypatch.setenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "3")
    accelerator = Accelerator()
    assert accelerator.mixed_precision == "bf16" and accelerator.gradient_accumulation_steps == 3


def test_free_memory_forgets_prepared_objects() -> None:
    accelerator = Accelerator()
    model = accelerator.prepare(make_model())
    assert accelerator._models
    (model,) = accelerator.free_memory(model)
    assert model is None and not accelerator._models


# --- DDP parity: 2 real processes against 1 process ----------------------------------------


def _train(steps: int, accumulation: int, global_size: int) -> list[float]:
    accelerator = Accelerator(gradient_accumulation_steps=accumulation)
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = accelerator.prepare(model, optimizer)
    world, rank = accelerator.num_processes, accelerator.process_index
    batches = global_batches(steps * accumulation, global_size)
    for x, y in batches:
        with accelerator.accumulate(model):
            x, y = local_rows(x, rank, world), local_rows(y, rank, world)
            loss = F.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
    return flat_params(model).tolist()


def _reference(steps: int, global_size: int) -> torch.Tensor:
    """Plain PyTorch, one process, the whole global batch per step."""
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for x, y in global_batches(steps, global_size):
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()
    return flat_params(model)


def test_ddp_two_processes_match_one_process(pool2: WorkerPool) -> None:
    r0, r1 = pool2.run(_train, 5, 1, 8)
    reference = _reference(5, 8)
    assert torch.allclose(torch.tensor(r0), reference, atol=1e-6)
    assert torch.equal(torch.tensor(r0), torch.tensor(r1))
    # and the same Accelerator code in this single process
    assert torch.allclose(torch.tensor(_train(5, 1, 8)), reference, atol=1e-6)


def test_accumulation_in_two_processes_matches_one_big_batch(pool2: WorkerPool) -> None:
    # 4 micro-batches of 4 rows per process, 2 processes == one batch of 32 in one process.
    steps, k = 3, 4
    r0, _ = pool2.run(_train, steps, k, 8)
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    batches = global_batches(steps * k, 8)
    for i in range(steps):
        x = torch.cat([b[0] for b in batches[i * k : (i + 1) * k]])
        y = torch.cat([b[1] for b in batches[i * k : (i + 1) * k]])
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()
    assert torch.allclose(torch.tensor(r0), flat_params(model), atol=1e-5)


def _count_allreduces(k: int, micro_steps: int, sync_each_batch: bool) -> list[bool]:
    import torch.distributed as dist

    plugin = GradientAccumulationPlugin(num_steps=k, sync_each_batch=sync_each_batch)
    accelerator = Accelerator(gradient_accumulation_plugin=plugin)
    model = accelerator.prepare(make_model())
    calls: list[int] = []

    # Left unannotated: DDP inspects hook annotations, which `from __future__ import annotations` turns into strings.
    def counting_hook(state, bucket):  # type: ignore[no-untyped-def]

        calls.append(1)
        tensor = bucket.buffer().div_(dist.get_world_size())
        return dist.all_reduce(tensor, async_op=True).get_future().then(lambda fut: fut.value()[0])

    model.register_comm_hook(None, counting_hook)
    synced: list[bool] = []
    for x, y in global_batches(micro_steps, 4):
        before = len(calls)
        with accelerator.accumulate(model):
            accelerator.backward(F.mse_loss(model(x), y))
        synced.append(len(calls) > before)
        assert accelerator.sync_gradients == synced[-1] or sync_each_batch
    return synced


def test_ddp_allreduces_only_on_sync_steps(pool2: WorkerPool) -> None:
    synced, _ = pool2.run(_count_allreduces, 3, 6, False)
    assert synced == [False, False, True, False, False, True]
    synced, _ = pool2.run(_count_allreduces, 3, 3, True)
    assert synced == [True, True, True]


def _ddp_kwargs_reach_module() -> dict[str, object]:
    import datetime

    import torch.distributed as dist

    handlers = [
        DistributedDataParallelKwargs(
            bucket_cap_mb=1,
            find_unused_parameters=True,
            broadcast_buffers=False,
            gradient_as_bucket_view=True,
        ),
        InitProcessGroupKwargs(timeout=datetime.timedelta(seconds=123)),
    ]
    accelerator = Accelerator(kwargs_handlers=handlers)
    model = accelerator.prepare(make_model())
    return {
        "type": type(model).__name__,
        "find_unused": model.find_unused_parameters,
        "broadcast_buffers": model.broadcast_buffers,
        "bucket_view": model.gradient_as_bucket_view,
        "bucket_bytes": model.bucket_bytes_cap,
        "backend": dist.get_backend(),
        "state_type": PartialState().distributed_type.value,
    }


def test_ddp_kwargs_are_applied(pool2: WorkerPool) -> None:
    result, _ = pool2.run(_ddp_kwargs_reach_module)
    assert result["type"] == "DistributedDataParallel"
    assert (
        result["find_unused"] is True
        and result["broadcast_buffers"] is False
        and result["bucket_view"] is True
    )
    assert result["bucket_bytes"] == 1024 * 1024
    assert result["backend"] == "gloo" and result["state_type"] == "MULTI_CPU"


def _fresh_group_with_timeout() -> dict[str, object]:
    import datetime

    import torch.distributed as dist

    if dist.is_initialized():  # an earlier call made one; start over so PartialState creates it
        dist.destroy_process_group()
    accelerator = Accelerator(
        kwargs_handlers=[InitProcessGroupKwargs(timeout=datetime.timedelta(seconds=77))]
    )
    backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
    accelerator.wait_for_everyone()
    return {"timeout": backend.options._timeout.total_seconds(), "world": accelerator.num_processes}


def test_init_process_group_kwargs_reach_the_group(pool2: WorkerPool) -> None:
    from tests.helpers.pool import free_port

    results = pool2.run(_fresh_group_with_timeout, env={"MASTER_PORT": str(free_port())})
    assert results == [{"timeout": 77.0, "world": 2}] * 2


def _clip_norm_under_ddp() -> float:
    accelerator = Accelerator()
    model = accelerator.prepare(make_model())
    x, y = global_batches(1, 8)[0]
    rank, world = accelerator.process_index, accelerator.num_processes
    accelerator.backward(F.mse_loss(model(local_rows(x, rank, world)), local_rows(y, rank, world)))
    return float(accelerator.clip_grad_norm_(model.parameters(), max_norm=1e9))


def test_clip_grad_norm_is_global_under_ddp(pool2: WorkerPool) -> None:
    norms = pool2.run(_clip_norm_under_ddp)
    reference = make_model()
    x, y = global_batches(1, 8)[0]
    F.mse_loss(reference(x), y).backward()
    expected = float(torch.nn.utils.clip_grad_norm_(reference.parameters(), 1e9))
    assert norms[0] == pytest.approx(expected, rel=1e-5) and norms[1] == pytest.approx(expected, rel=1e-5)


def _comm_hook_name() -> str:
    accelerator = Accelerator(kwargs_handlers=[DistributedDataParallelKwargs(comm_hook="fp16")])
    model = accelerator.prepare(make_model())
    accelerator.backward(model(torch.ones(2, 8)).sum())
    return str(model._get_ddp_logging_data().get("comm_hook", ""))


def test_ddp_comm_hook_choice_is_registered(pool2: WorkerPool) -> None:
    assert all("fp16_compress_hook" in name for name in pool2.run(_comm_hook_name))


def _power_sgd_with_wrapper() -> str:
    handler = DistributedDataParallelKwargs(
        comm_hook="power_sgd", comm_wrapper="fp16", comm_state_option={"matrix_approximation_rank": 1}
    )
    accelerator = Accelerator(kwargs_handlers=[handler])
    model = accelerator.prepare(make_model())
    accelerator.backward(model(torch.ones(2, 8)).sum())
    return str(model._get_ddp_logging_data().get("comm_hook", ""))


def test_ddp_comm_wrapper_wraps_power_sgd(pool2: WorkerPool) -> None:
    assert all("fp16_compress_wrapper" in name for name in pool2.run(_power_sgd_with_wrapper))


def _wrapper_without_hook() -> str:
    accelerator = Accelerator(kwargs_handlers=[DistributedDataParallelKwargs(comm_wrapper="fp16")])
    try:
        accelerator.prepare(make_model())
    except ValueError as exc:
        return str(exc)
    return "accepted"


def test_ddp_comm_wrapper_alone_is_an_error(pool2: WorkerPool) -> None:
    assert all("comm_hook='power_sgd'" in text for text in pool2.run(_wrapper_without_hook))


def _one_cycle_steps(num_batches: int) -> int:
    accelerator = Accelerator()
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=num_batches)
    data = torch.utils.data.TensorDataset(torch.randn(num_batches * 2, 8))
    loader = torch.utils.data.DataLoader(data, batch_size=2)  # written for the 1-process run
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    for (x,) in loader:
        accelerator.backward(model(x).sum())
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    return int(scheduler.scheduler.last_epoch)


def test_one_cycle_schedule_ends_cleanly_on_two_processes(pool2: WorkerPool) -> None:
    # 7 batches: 4 steps per process, 2 schedule steps each = 8 > 7; the last one must not raise.
    assert pool2.run(_one_cycle_steps, 7) == [7, 7]


def test_dataloader_config_given_by_the_user_is_not_modified() -> None:
    from accelerate.utils import DataLoaderConfiguration

    config = DataLoaderConfiguration()
    accelerator = Accelerator(dataloader_config=config, split_batches=True)
    assert accelerator.split_batches is True and config.split_batches is False


@pytest.mark.parametrize("source", ["argument", "environment"])
def test_dynamo_backend_reaches_torch_compile(source: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if source == "environment":
        monkeypatch.setenv("ACCELERATE_DYNAMO_BACKEND", "eager")  # what `accelerate launch` writes
        accelerator = Accelerator()
    else:
        accelerator = Accelerator(dynamo_backend="eager")
    original = make_model()
    model = accelerator.prepare(original)
    assert isinstance(model, torch._dynamo.eval_frame.OptimizedModule)
    assert accelerator.unwrap_model(model, keep_torch_compile=False) is original
    assert accelerator.unwrap_model(model) is model  # upstream's default keeps the compiled wrapper
    x = torch.randn(3, 8)
    torch.testing.assert_close(model(x), original(x))
    torch._dynamo.reset()


def test_dynamo_backend_no_leaves_the_model_uncompiled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCELERATE_DYNAMO_BACKEND", "no")
    model = Accelerator().prepare(make_model())
    assert not isinstance(model, torch._dynamo.eval_frame.OptimizedModule)


def _gather_with_graph() -> dict[str, object]:
    accelerator = Accelerator()
    rank = accelerator.process_index
    model = accelerator.prepare(make_model())
    logits = model(torch.full((2, 8), float(rank)))
    assert logits.requires_grad
    gathered = accelerator.gather(logits)
    for_metrics = accelerator.gather_for_metrics({"logits": logits, "labels": torch.tensor([rank, rank])})
    with torch.no_grad():
        expected = torch.cat([model(torch.full((2, 8), float(r))) for r in range(2)])
    return {
        "same": torch.allclose(gathered, expected),
        "metrics_same": torch.allclose(for_metrics["logits"], expected),
        "labels": for_metrics["labels"].tolist(),
        "requires_grad": gathered.requires_grad,
    }


def test_gather_of_outputs_that_carry_a_graph(pool2: WorkerPool) -> None:
    for result in pool2.run(_gather_with_graph, timeout=60):
        assert result == {"same": True, "metrics_same": True, "labels": [0, 0, 1, 1], "requires_grad": False}


def test_prepare_marks_what_it_prepared_and_does_not_prepare_it_twice() -> None:
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1)
    loader = torch.utils.data.DataLoader(list(range(4)), batch_size=2)
    prepared = accelerator.prepare(model, optimizer, scheduler, loader, "other")
    assert all(obj._is_accelerate_prepared is True for obj in prepared[:4])
    assert not hasattr(prepared[4], "_is_accelerate_prepared")
    assert accelerator.prepare_data_loader(prepared[3]) is prepared[3]
    assert accelerator.prepare_scheduler(prepared[2]) is prepared[2]
    assert accelerator.prepare(prepared[3]) is prepared[3]
    assert len(accelerator._dataloaders) == 1 and len(accelerator._schedulers) == 1
    # A loader prepared by another accelerator (transformers' Trainer re-prepares) is registered, not rewrapped.
    other = Accelerator(cpu=True)
    assert other.prepare_data_loader(prepared[3]) is prepared[3] and other._dataloaders == [prepared[3]]


def test_bitsandbytes_multi_backend_check_at_upstreams_path() -> None:
    from accelerate import accelerator as accelerator_module
    from accelerate.utils.imports import is_bitsandbytes_multi_backend_available

    assert (
        accelerator_module.is_bitsandbytes_multi_backend_available is is_bitsandbytes_multi_backend_available
    )
    assert isinstance(accelerator_module.is_bitsandbytes_multi_backend_available(), bool)
