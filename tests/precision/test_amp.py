from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from accelerate import Accelerator
from accelerate.utils import AutocastKwargs, GradScalerKwargs
from tests.training_helpers import flat_params, global_batches, make_model


def _accelerate_losses(mode: str, steps: int) -> tuple[list[float], torch.Tensor]:
    accelerator = Accelerator(mixed_precision=mode)
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer = accelerator.prepare(model, optimizer)
    losses = []
    for x, y in global_batches(steps, 16):
        optimizer.zero_grad()
        out = model(x)
        assert out.dtype == torch.float32  # outputs come back in fp32
        loss = F.mse_loss(out, y)
        accelerator.backward(loss)
        optimizer.step()
        losses.append(loss.item())
    return losses, flat_params(model)


def _torch_amp_losses(dtype: torch.dtype, steps: int) -> tuple[list[float], torch.Tensor]:
    """The hand-written torch.amp loop the Accelerator must reproduce."""
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cpu") if dtype == torch.float16 else None
    losses = []
    for x, y in global_batches(steps, 16):
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=dtype):
            out = model(x)
        loss = F.mse_loss(out.float(), y)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        losses.append(loss.item())
    return losses, flat_params(model)


@pytest.mark.parametrize(("mode", "dtype"), [("fp16", torch.float16), ("bf16", torch.bfloat16)])
def test_mixed_precision_matches_hand_written_amp_loop(mode: str, dtype: torch.dtype) -> None:
    losses, params = _accelerate_losses(mode, 30)
    ref_losses, ref_params = _torch_amp_losses(dtype, 30)
    assert losses == ref_losses  # step for step
    assert torch.equal(params, ref_params)
    assert losses[-1] < losses[0]


def test_autocast_context_and_properties() -> None:
    accelerator = Accelerator(mixed_precision="bf16")
    assert accelerator.native_amp and accelerator.mixed_precision == "bf16"
    a, b = torch.ones(4, 4), torch.ones(4, 4)
    with accelerator.autocast():
        assert (a @ b).dtype == torch.bfloat16
    with accelerator.autocast(AutocastKwargs(enabled=False)):
        assert (a @ b).dtype == torch.float32
    assert (a @ b).dtype == torch.float32


def test_no_precision_is_plain() -> None:
    accelerator = Accelerator()
    assert not accelerator.native_amp and accelerator.scaler is None
    with accelerator.autocast():
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32


def test_fp16_parameters_with_fp16_scaling_is_a_clear_error() -> None:
    accelerator = Accelerator(mixed_precision="fp16")
    with pytest.raises(ValueError, match=r"already fp16.*model.float\(\)"):
        accelerator.prepare(make_model().half())


def test_inf_gradient_skips_step_halves_scale_and_holds_scheduler() -> None:
    accelerator = Accelerator(mixed_precision="fp16", kwargs_handlers=[GradScalerKwargs(init_scale=1024.0)])
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    x, y = global_batches(1, 4)[0]

    accelerator.backward(F.mse_loss(model(x), y))
    optimizer.step()
    scheduler.step()
    assert not accelerator.optimizer_step_was_skipped
    assert scheduler.get_last_lr() == [0.05]

    before = flat_params(model)
    optimizer.zero_grad()
    accelerator.backward(F.mse_loss(model(x), y))
    next(iter(accelerator.unwrap_model(model).parameters())).grad[0, 0] = float("inf")
    optimizer.step()
    scheduler.step()
    assert accelerator.optimizer_step_was_skipped and optimizer.step_was_skipped
    assert accelerator.scaler is not None and accelerator.scaler.get_scale() == 512.0
    assert torch.equal(before, flat_params(model))
    assert scheduler.get_last_lr() == [0.05]  # did not advance


def test_grad_scaler_kwargs_reach_the_scaler() -> None:
    handler = GradScalerKwargs(init_scale=8.0, growth_factor=3.0, backoff_factor=0.25, growth_interval=7)
    accelerator = Accelerator(mixed_precision="fp16", kwargs_handlers=[handler])
    scaler = accelerator.scaler
    assert scaler is not None
    assert (
        scaler.get_scale(),
        scaler.get_growth_factor(),
        scaler.get_backoff_factor(),
        scaler.get_growth_interval(),
    ) == (
        8.0,
        3.0,
        0.25,
        7,
    )


def test_autocast_kwargs_reach_autocast() -> None:
    accelerator = Accelerator(mixed_precision="bf16", kwargs_handlers=[AutocastKwargs(cache_enabled=False)])
    with accelerator.autocast():
        assert torch.is_autocast_cache_enabled() is False


def test_clip_grad_norm_returns_norm_of_unscaled_gradients() -> None:
    accelerator = Accelerator(mixed_precision="fp16", kwargs_handlers=[GradScalerKwargs(init_scale=4096.0)])
    model = make_model()
    reference = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    x, y = global_batches(1, 8)[0]
    accelerator.backward(F.mse_loss(model(x), y))
    norm = accelerator.clip_grad_norm_(model.parameters(), max_norm=1e9)
    with torch.autocast("cpu", dtype=torch.float16):
        out = reference(x)
    F.mse_loss(out.float(), y).backward()
    expected = torch.nn.utils.clip_grad_norm_(reference.parameters(), 1e9)
    assert torch.allclose(norm, expected, rtol=1e-3)
    optimizer.step()  # unscaled exactly once: stepping after clipping must not unscale again
    assert not accelerator.optimizer_step_was_skipped


def test_clip_grad_value() -> None:
    accelerator = Accelerator()
    model = accelerator.prepare(make_model())
    model(torch.ones(2, 8)).sum().mul(100).backward()
    accelerator.clip_grad_value_(model.parameters(), 0.01)
    assert max(p.grad.abs().max().item() for p in model.parameters()) <= 0.01


def test_fp16_two_optimizers_with_clipping_unscale_once_each() -> None:
    """One backward, two optimizers, clipping first: each is unscaled once, with the right scale."""
    accelerator = Accelerator(mixed_precision="fp16", kwargs_handlers=[GradScalerKwargs(init_scale=1024.0)])
    a, b = make_model(0), make_model(1)
    ref_a, ref_b = make_model(0), make_model(1)
    opt_a = torch.optim.SGD(a.parameters(), lr=0.1)
    opt_b = torch.optim.SGD(b.parameters(), lr=0.1)
    a, b, opt_a, opt_b = accelerator.prepare(a, b, opt_a, opt_b)
    ref_opts = [torch.optim.SGD(ref_a.parameters(), lr=0.1), torch.optim.SGD(ref_b.parameters(), lr=0.1)]
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    for x, y in global_batches(3, 8):
        accelerator.backward(F.mse_loss(a(x), y) + F.mse_loss(b(x), y))
        accelerator.clip_grad_norm_(list(a.parameters()) + list(b.parameters()), 1e9)
        opt_a.step()
        opt_b.step()
        opt_a.zero_grad()
        opt_b.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            out_a, out_b = ref_a(x), ref_b(x)
        scaler.scale(F.mse_loss(out_a.float(), y) + F.mse_loss(out_b.float(), y)).backward()
        for opt in ref_opts:
            scaler.unscale_(opt)
        for opt in ref_opts:
            scaler.step(opt)
        scaler.update()
        for opt in ref_opts:
            opt.zero_grad()
    assert torch.equal(flat_params(a), flat_params(ref_a))
    assert torch.equal(flat_params(b), flat_params(ref_b))
    assert accelerator.scaler is not None and accelerator.scaler.get_scale() == scaler.get_scale()


def test_unwrap_model_can_drop_the_fp32_wrapper() -> None:
    accelerator = Accelerator(mixed_precision="bf16")
    model = accelerator.prepare(make_model())
    assert model(torch.ones(1, 8)).dtype == torch.float32
    bare = accelerator.unwrap_model(model, keep_fp32_wrapper=False)
    assert bare(torch.ones(1, 8)).dtype == torch.float32  # no autocast any more: plain fp32 compute
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert bare(torch.ones(1, 8)).dtype == torch.bfloat16  # and no conversion back to fp32


def test_fp16_scale_reflects_each_step_at_once_when_other_optimizers_do_not_step(tmp_path) -> None:
    """A GAN-like loop: only one of two prepared optimizers steps. The loss scale after that step
    already reflects its inf/nan outcome, and save_state right after writes that scale."""
    accelerator = Accelerator(
        mixed_precision="fp16", kwargs_handlers=[GradScalerKwargs(init_scale=1024.0, growth_interval=1)]
    )
    d, g = make_model(0), make_model(1)
    opt_d, opt_g = torch.optim.SGD(d.parameters(), lr=0.1), torch.optim.SGD(g.parameters(), lr=0.1)
    d, g, opt_d, opt_g = accelerator.prepare(d, g, opt_d, opt_g)
    x, y = global_batches(1, 8)[0]
    accelerator.backward(F.mse_loss(d(x), y) * float("inf"))  # overflows
    opt_d.step()
    assert accelerator.optimizer_step_was_skipped
    assert accelerator.scaler is not None and accelerator.scaler.get_scale() == 512.0  # backed off now
    opt_d.zero_grad()
    accelerator.backward(F.mse_loss(d(x), y))
    opt_d.step()
    assert not accelerator.optimizer_step_was_skipped and accelerator.scaler.get_scale() == 1024.0
    accelerator.save_state(str(tmp_path / "ckpt"))
    assert torch.load(tmp_path / "ckpt" / "scaler.pt", weights_only=True)["scale"] == 1024.0


def test_fp16_one_backward_two_optimizers_one_overflowing_backs_off_once() -> None:
    """Two optimizers on one backward, the second finds inf: the scale backs off once, from the scale
    the gradients were made with, like one GradScaler.update() after both steps."""
    accelerator = Accelerator(
        mixed_precision="fp16", kwargs_handlers=[GradScalerKwargs(init_scale=1024.0, growth_interval=1)]
    )
    a, b = make_model(0), make_model(1)
    opt_a, opt_b = torch.optim.SGD(a.parameters(), lr=0.1), torch.optim.SGD(b.parameters(), lr=0.1)
    a, b, opt_a, opt_b = accelerator.prepare(a, b, opt_a, opt_b)
    x, y = global_batches(1, 8)[0]
    before_b = flat_params(b)
    accelerator.backward(F.mse_loss(a(x), y) + F.mse_loss(b(x), y) * float("inf"))
    opt_a.step()  # a's gradients are finite: the scale grows (growth_interval=1) ...
    assert not accelerator.optimizer_step_was_skipped and accelerator.scaler.get_scale() == 2048.0
    opt_b.step()  # ... then b overflows: one back-off from 1024, as a single update would give
    assert accelerator.optimizer_step_was_skipped and accelerator.scaler.get_scale() == 512.0
    assert torch.equal(flat_params(b), before_b)
