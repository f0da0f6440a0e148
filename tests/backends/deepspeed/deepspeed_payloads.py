"""What each rank runs in the DeepSpeed tests (top-level functions: the worker pool imports them by name)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

SAMPLES = 32
LR = 1e-2


def make_model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))


def make_data() -> TensorDataset:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(SAMPLES, 6, generator=g)
    y = torch.stack([x.sum(1), x[:, 0] * x[:, 1]], dim=1)
    return TensorDataset(x, y)


def reference_weights(batch_size: int, steps_per_update: int = 1) -> dict[str, torch.Tensor]:
    """Plain torch in one process: full global batches (``batch_size`` = per-rank batch x 2 ranks)."""
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    loader = DataLoader(make_data(), batch_size=batch_size)
    for i, (x, y) in enumerate(loader, start=1):
        (F.mse_loss(model(x), y) / steps_per_update).backward()
        if i % steps_per_update == 0:
            optimizer.step()
            optimizer.zero_grad()
    return {k: v.clone() for k, v in model.state_dict().items()}


def _accelerator(stage: int, **kwargs: Any) -> Any:
    from accelerate import Accelerator
    from accelerate.utils import DeepSpeedPlugin

    plugin_kwargs = {
        k: kwargs.pop(k)
        for k in ("gradient_clipping", "zero3_save_16bit_model", "hf_ds_config")
        if k in kwargs
    }
    if "hf_ds_config" not in plugin_kwargs:
        plugin_kwargs["zero_stage"] = stage
        plugin_kwargs.setdefault("zero3_save_16bit_model", True)
    return Accelerator(deepspeed_plugin=DeepSpeedPlugin(**plugin_kwargs), **kwargs)


def train(
    stage: int, *, batch_size: int = 4, gas: int = 1, mixed_precision: str = "no", hf_ds_config: Any = None
) -> dict[str, Any]:
    """The five-line loop under ZeRO-``stage``; returns the full weights and facts about the run."""
    extra = {"hf_ds_config": hf_ds_config} if hf_ds_config is not None else {}
    accelerator = _accelerator(
        stage, gradient_accumulation_steps=gas, mixed_precision=mixed_precision, **extra
    )
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    loader = DataLoader(make_data(), batch_size=batch_size)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    losses = []
    for x, y in loader:
        with accelerator.accumulate(model):
            loss = F.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        losses.append(loss.item())
    local = sum(p.numel() for p in model.module.parameters() if p.numel() > 0)
    partitioned = sum(getattr(p, "ds_tensor", p).numel() for p in model.module.parameters())
    weights = accelerator.get_state_dict(model)
    return {
        "weights": {k: v.float().clone() for k, v in weights.items()},
        "losses": losses,
        "distributed_type": accelerator.distributed_type.value,
        "local_numel": local,
        "partitioned_numel": partitioned,
        "total_numel": sum(p.numel() for p in make_model().parameters()),
        "config": accelerator.deepspeed_plugin.deepspeed_config if hasattr(model, "config") else None,
        "engine_config_micro": model.train_micro_batch_size_per_gpu(),
        "engine_gas": model.gradient_accumulation_steps(),
    }


def _loop_with_scheduler(stage: int) -> tuple[Any, Any, Any, Any, Any]:
    accelerator = _accelerator(stage)
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1 + step))
    loader = DataLoader(make_data(), batch_size=2, shuffle=True, generator=torch.Generator().manual_seed(3))
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    return accelerator, model, optimizer, loader, scheduler


def _steps(accelerator: Any, model: Any, optimizer: Any, scheduler: Any, batches: Any) -> None:
    for x, y in batches:
        accelerator.backward(F.mse_loss(model(x), y))
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()


def save_midway(stage: int, folder: str, save_after: int) -> dict[str, Any]:
    """Trains one epoch, saving after ``save_after`` steps; returns the final weights and lr."""
    accelerator, model, optimizer, loader, scheduler = _loop_with_scheduler(stage)
    for step, (x, y) in enumerate(loader, start=1):
        _steps(accelerator, model, optimizer, scheduler, [(x, y)])
        if step == save_after:
            accelerator.save_state(folder)
    return {"weights": {k: v.float().clone() for k, v in accelerator.get_state_dict(model).items()},
            "lr": scheduler.get_last_lr()}  # fmt: skip


def resume(stage: int, folder: str, save_after: int) -> dict[str, Any]:
    """A fresh run that loads ``folder`` and finishes the epoch."""
    accelerator, model, optimizer, loader, scheduler = _loop_with_scheduler(stage)
    accelerator.load_state(folder)
    _steps(accelerator, model, optimizer, scheduler, accelerator.skip_first_batches(loader, save_after))
    return {"weights": {k: v.float().clone() for k, v in accelerator.get_state_dict(model).items()},
            "lr": scheduler.get_last_lr()}  # fmt: skip


def bf16_facts() -> dict[str, Any]:
    """ZeRO-2 in bf16: the engine holds bf16 weights (fp32 master copies in the optimizer) and learns."""
    accelerator = _accelerator(2, mixed_precision="bf16")
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    loader = DataLoader(make_data(), batch_size=4)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    losses = []
    for _ in range(3):
        for x, y in loader:
            loss = F.mse_loss(model(x).float(), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
    return {
        "dtype": str(next(model.module.parameters()).dtype),
        "config_bf16": accelerator.deepspeed_plugin.deepspeed_config["bf16"]["enabled"],
        "first": sum(losses[:4]) / 4,
        "last": sum(losses[-4:]) / 4,
    }


def save_model_zero3(folder: str) -> dict[str, Any]:
    """ZeRO-3 save_model writes the gathered full weights; load_checkpoint_in_model reads them back."""
    from accelerate.utils import load_checkpoint_in_model

    result = train(3)
    accelerator = _accelerator(3)
    model = make_model()
    model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=LR))
    accelerator.save_model(model, folder)
    accelerator.wait_for_everyone()
    fresh = make_model(seed=5)
    load_checkpoint_in_model(fresh, folder)
    return {
        "loaded": {k: v.clone() for k, v in fresh.state_dict().items()},
        "want": make_model().state_dict(),
        "trained": result,
    }


ZERO3_CONFIG = {
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": 0.0,
    # small parameters are otherwise kept whole on every rank (DeepSpeed's persistence threshold)
    "zero_optimization": {
        "stage": 3,
        "stage3_param_persistence_threshold": 0,
        "stage3_gather_16bit_weights_on_model_save": True,
    },
}

AUTO_CONFIG = {
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "bf16": {"enabled": "auto"},
    "zero_optimization": {"stage": 2},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto", "torch_adam": True}},
    "scheduler": {
        "type": "WarmupLR",
        "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto", "warmup_num_steps": "auto"},
    },
}


def train_auto_config() -> dict[str, Any]:
    """A user JSON full of "auto", with DummyOptim/DummyScheduler standing for its optimizer/scheduler."""
    from accelerate import Accelerator
    from accelerate.utils import DeepSpeedPlugin, DummyOptim, DummyScheduler

    accelerator = Accelerator(
        deepspeed_plugin=DeepSpeedPlugin(hf_ds_config=AUTO_CONFIG), gradient_accumulation_steps=2
    )
    model = make_model()
    optimizer = DummyOptim(model.parameters(), lr=0.02, weight_decay=0.0)
    scheduler = DummyScheduler(optimizer, warmup_num_steps=3)
    loader = DataLoader(make_data(), batch_size=2)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    losses = []
    for _ in range(2):
        for x, y in loader:
            with accelerator.accumulate(model):
                loss = F.mse_loss(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            losses.append(loss.item())
    config = model.config  # the engine's completed config
    return {
        "micro": model.train_micro_batch_size_per_gpu(),
        "gas": model.gradient_accumulation_steps(),
        "train_batch_size": config["train_batch_size"],
        "lr_max": config["scheduler"]["params"]["warmup_max_lr"],
        "clipping": config["gradient_clipping"],
        "optimizer": type(optimizer.optimizer).__name__,
        "lr_now": scheduler.get_last_lr(),
        "first": sum(losses[: len(losses) // 2]),  # the same batches, epoch 1 and epoch 2
        "last": sum(losses[len(losses) // 2 :]),
    }


def zero3_init_and_gather() -> dict[str, Any]:
    """zero3_init_flag: the model is partitioned as it is built; GatheredParameters shows whole weights."""
    from accelerate import Accelerator
    from accelerate.utils import DeepSpeedPlugin, GatheredParameters

    plugin = DeepSpeedPlugin(hf_ds_config=dict(ZERO3_CONFIG), zero3_init_flag=True)
    accelerator = Accelerator(deepspeed_plugin=plugin)
    with plugin.zero3_init():
        model = make_model()
    first = model[0].weight
    built = {"ds_id": hasattr(first, "ds_id"), "numel": first.numel(), "partition": first.ds_tensor.numel()}
    with GatheredParameters(first):
        built["gathered"] = first.detach().clone()
    model = _prepare_and_train_one_epoch(accelerator, model)
    built["weights"] = {k: v.float().clone() for k, v in accelerator.get_state_dict(model).items()}
    return built


def save_with_an_engine_without_optimizer(folder: str) -> str:
    """save_state with a second engine prepared alone (no optimizer): the error, on every rank."""
    accelerator = _accelerator(3)
    model = make_model()
    model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=LR))
    accelerator.prepare(torch.nn.Linear(8, 8))  # a frozen helper, say: an engine without optimizer
    try:
        accelerator.save_state(folder)
    except Exception as exc:  # the test checks the message
        return f"{type(exc).__name__}: {exc}"
    return "saved"


def prepare_again_after_free_memory(folder: str) -> dict[str, Any]:
    """A batch-size search's pattern: prepare, free_memory, prepare anew, train, save_state."""
    accelerator = _accelerator(2)
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    model, optimizer = accelerator.prepare(model, optimizer)
    model, optimizer = accelerator.free_memory(model, optimizer)
    model = _prepare_and_train_one_epoch(accelerator, make_model())
    accelerator.save_state(folder)
    return {"engines": len(accelerator.strategy.engines), "weights": accelerator.get_state_dict(model)}


def _prepare_and_train_one_epoch(accelerator: Any, model: torch.nn.Module) -> Any:
    """Prepares ``model`` with AdamW and the data (batches of 4) and trains one epoch; the engine."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    loader = DataLoader(make_data(), batch_size=4)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for x, y in loader:
        accelerator.backward(F.mse_loss(model(x), y))
        optimizer.step()
        optimizer.zero_grad()
    return model


def regional_compilation_facts() -> dict[str, Any]:
    """ZeRO-3 with TorchDynamoPlugin(use_regional_compilation=True): the engine's blocks compile in place."""
    from torch import nn

    from accelerate.utils import TorchDynamoPlugin

    accelerator = _accelerator(
        3, dynamo_plugin=TorchDynamoPlugin(backend="eager", use_regional_compilation=True)
    )
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(6, 8), nn.ModuleList([nn.Linear(8, 8) for _ in range(3)]), nn.Linear(8, 2)
    )

    class Tower(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inp, self.blocks, self.out = model[0], model[1], model[2]

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.inp(x)
            for block in self.blocks:
                h = torch.tanh(block(h))
            return self.out(h)

    tower = Tower()
    optimizer = torch.optim.AdamW(tower.parameters(), lr=LR)
    loader = DataLoader(make_data(), batch_size=4)
    engine, optimizer, loader = accelerator.prepare(tower, optimizer, loader)
    x, y = next(iter(loader))
    loss = F.mse_loss(engine(x), y)
    accelerator.backward(loss)
    optimizer.step()
    return {
        "module_is_the_model": engine.module is tower,
        "blocks_compiled": [block._compiled_call_impl is not None for block in engine.module.blocks],
        "loss_finite": bool(torch.isfinite(loss).item()),
    }
