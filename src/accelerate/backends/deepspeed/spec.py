"""DeepSpeed's row in the backend table: its named plugins from ``deepspeed_plugin(s)`` and the
launcher's ``--use_deepspeed`` settings, :class:`DeepSpeedStrategy`, the config's accumulation, and
no fp8 (its engine wraps and steps the model itself)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from accelerate.backends.spec import BackendRequest, BackendSpec, BuildContext

if TYPE_CHECKING:
    from accelerate.backends.base import Strategy
    from accelerate.utils.dataclasses import GradientAccumulationPlugin


class DeepSpeedSpec(BackendSpec):
    label = "DeepSpeed"
    runs_fp8 = False  # no fp8 conversion is wired into DeepSpeed's engine here

    def plugin(self, request: BackendRequest) -> Any:
        from accelerate.backends.deepspeed.launch import resolve_deepspeed_plugins

        return resolve_deepspeed_plugins(
            request.given("deepspeed_plugin"),
            request.given("deepspeed_plugins"),
            launched=bool(request.launch.use_deepspeed),
            launch_env=request.launch,
        )

    def runs(self, context: BuildContext) -> bool:
        return bool(context.plugins.get("deepspeed"))

    def strategy(self, context: BuildContext) -> Strategy:
        from accelerate.backends.deepspeed.strategy import DeepSpeedStrategy

        return DeepSpeedStrategy(context.partial.device, context.plugins["deepspeed"])

    def adjust_accumulation(
        self, plugin: Any, accumulation: GradientAccumulationPlugin, mixed_precision: str
    ) -> GradientAccumulationPlugin:
        if not plugin:
            return accumulation
        from accelerate.backends.deepspeed.plugin import deepspeed_accumulation

        # The DeepSpeed config's value wins (with a warning); its "auto" takes the Accelerator's.
        return deepspeed_accumulation(plugin, accumulation, mixed_precision)

    def describe(self, plugin: Any, strategy: Strategy, *, sharded: bool) -> dict[str, Any]:
        return {"deepspeed_plugins": plugin}


spec = DeepSpeedSpec()
