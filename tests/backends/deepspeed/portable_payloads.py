"""What each rank runs in the tests of DeepSpeed checkpoints that move to another ZeRO stage or world size."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from tests.backends.deepspeed.deepspeed_payloads import LR, _accelerator, make_data, make_model


def layout_accelerator(layout: int | str) -> Any:
    """An Accelerator for a layout: a ZeRO stage, or ``"<stage>[-bf16|-bf16opt][-offload]"``.

    ``bf16`` is accelerate's ``mixed_precision="bf16"`` (DeepSpeed's ZeRO optimizer with bf16 weights);
    ``bf16opt`` also accumulates gradients in fp32, which makes DeepSpeed use its separate
    ``BF16_Optimizer`` under ZeRO-1; ``offload`` puts the optimizer (DeepSpeedCPUAdam) on the CPU.
    """
    from accelerate import Accelerator
    from accelerate.utils import DeepSpeedPlugin

    stage, *flags = str(layout).split("-")
    if not flags:
        return _accelerator(int(stage))
    zero: dict[str, Any] = {"stage": int(stage), "stage3_gather_16bit_weights_on_model_save": True}
    config: dict[str, Any] = {
        "train_batch_size": "auto",
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "gradient_clipping": 0.0,
        "zero_optimization": zero,
    }
    if "offload" in flags:
        zero["offload_optimizer"] = {"device": "cpu"}
    if "bf16opt" in flags:
        config["data_types"] = {"grad_accum_dtype": "fp32"}
    bf16 = "bf16" in flags or "bf16opt" in flags
    return Accelerator(
        deepspeed_plugin=DeepSpeedPlugin(hf_ds_config=config), mixed_precision="bf16" if bf16 else "no"
    )


def _setup(stage: int | str, batch_size: int) -> tuple[Any, Any, Any, Any, Any]:
    accelerator = layout_accelerator(stage)
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1 + step))
    loader = DataLoader(
        make_data(), batch_size=batch_size, shuffle=True, generator=torch.Generator().manual_seed(3)
    )
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    return accelerator, model, optimizer, loader, scheduler


def _weights(accelerator: Any, model: Any) -> dict[str, torch.Tensor]:
    return {k: v.float().clone() for k, v in accelerator.get_state_dict(model).items()}


def _moments(model: Any) -> dict[str, torch.Tensor]:
    """Adam's first moment per parameter, whole (DeepSpeed's getter gathers it: a collective).

    Stage 0 has no getter: its optimizer steps the parameters themselves (fp32) or one flat fp32 copy
    per group (bf16's FP16_Optimizer)."""
    from deepspeed.utils import safe_get_full_optimizer_state

    moments = {}
    for name, param in model.module.named_parameters():
        value = safe_get_full_optimizer_state(param, "exp_avg")
        moments[name] = (value if value is not None else _stage0_moment(model.optimizer, param)).clone()
    return moments


def _stage0_moment(optimizer: Any, param: torch.nn.Parameter) -> torch.Tensor:
    if param in optimizer.state:
        return optimizer.state[param]["exp_avg"].float()
    for group, masters in zip(optimizer.fp16_groups, getattr(optimizer, "fp32_groups", []), strict=False):
        for p, master in zip(group, masters, strict=True):  # unfused: one fp32 master per parameter
            if p is param:
                return optimizer.optimizer.state[master]["exp_avg"].float()
    for group, flat in zip(optimizer.fp16_groups, optimizer.fp32_groups_flat, strict=True):
        offset = 0
        for p in group:
            if p is param:
                return optimizer.optimizer.state[flat]["exp_avg"].narrow(0, offset, p.numel()).view(p.shape)
            offset += p.numel()
    raise AssertionError("parameter not found in the stage-0 optimizer")


def resume_elsewhere(stage: int | str, folder: str, save_after: int, batch_size: int) -> dict[str, Any]:
    """Loads ``folder`` (saved by another layout) and finishes the epoch: weights after the next step and at the end."""
    accelerator, model, optimizer, loader, scheduler = _setup(stage, batch_size)
    accelerator.load_state(folder)
    loaded = _weights(accelerator, model)
    moments = _moments(model)
    facts = {"optimizer": type(model.optimizer).__name__}
    after_next: dict[str, torch.Tensor] = {}
    for step, (x, y) in enumerate(accelerator.skip_first_batches(loader, save_after)):
        accelerator.backward(F.mse_loss(model(x), y))
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        if step == 0:
            after_next = _weights(accelerator, model)
    return {**facts, "loaded": loaded, "exp_avg": moments, "next": after_next, "final": _weights(accelerator, model),
            "lr": scheduler.get_last_lr(), "global_steps": model.global_steps}  # fmt: skip


def save_then_record(stage: int | str, folder: str, save_after: int, batch_size: int) -> dict[str, Any]:
    """The run that does not move: saves after ``save_after`` steps and records the same facts."""
    accelerator, model, optimizer, loader, scheduler = _setup(stage, batch_size)
    facts: dict[str, Any] = {"optimizer": type(model.optimizer).__name__}
    for step, (x, y) in enumerate(loader, start=1):
        accelerator.backward(F.mse_loss(model(x), y))
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        if step == save_after:
            accelerator.save_state(folder)
            facts["loaded"] = _weights(accelerator, model)
            facts["exp_avg"] = _moments(model)
        if step == save_after + 1:
            facts["next"] = _weights(accelerator, model)
    return {**facts, "final": _weights(accelerator, model), "lr": scheduler.get_last_lr(),
            "global_steps": model.global_steps}  # fmt: skip


def load_into_a_wider_model(stage: int, folder: str) -> dict[str, Any]:
    """load_state into a model whose first layer is wider: the error, and whether anything changed."""
    accelerator = _accelerator(stage)
    torch.manual_seed(7)
    model = torch.nn.Sequential(torch.nn.Linear(6, 24), torch.nn.Tanh(), torch.nn.Linear(24, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    model, optimizer = accelerator.prepare(model, optimizer)
    before = _weights(accelerator, model)
    try:
        accelerator.load_state(folder)
        message = "loaded"
    except Exception as exc:  # the test checks the message
        message = f"{type(exc).__name__}: {exc}"
    after = _weights(accelerator, model)
    return {"message": message, "unchanged": all(torch.equal(before[k], after[k]) for k in before)}


def start_from_weights(engine: str, weights: str, folder: str) -> dict[str, Any]:
    """A run that starts from one weights file (merge-weights' output, or a transformers folder): loaded into the
    plain model before prepare, then prepared under FSDP2 or DeepSpeed ZeRO-3, one step, and save_state."""
    from accelerate import Accelerator
    from accelerate.utils import FullyShardedDataParallelPlugin, load_checkpoint_in_model

    model = make_model(seed=9)  # other weights: the file must replace every one of them
    load_checkpoint_in_model(model, weights, strict=True)
    if engine == "fsdp2":
        accelerator = Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2))
    else:
        accelerator = _accelerator(3)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    loader = DataLoader(make_data(), batch_size=4)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    loaded = _weights(accelerator, model)
    x, y = next(iter(loader))
    accelerator.backward(F.mse_loss(model(x), y))
    optimizer.step()
    optimizer.zero_grad()
    accelerator.save_state(folder)
    return {"loaded": loaded, "stepped": _weights(accelerator, model)}
