"""FSDP's row in the backend table: its plugin from ``fsdp_plugin`` and the launcher's ``FSDP_*``
settings, and :class:`FSDPStrategy` when several processes shard (one process runs unsharded)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from accelerate.backends.spec import BackendRequest, BackendSpec, BuildContext

if TYPE_CHECKING:
    from accelerate.backends.base import Strategy
    from accelerate.backends.fsdp.plugin import FullyShardedDataParallelPlugin
    from accelerate.config.env import LaunchEnv


def resolve_fsdp_plugin(plugin: Any, launch: LaunchEnv) -> FullyShardedDataParallelPlugin | None:
    """The FSDP plugin this run uses: the argument, else one the launcher asked for (``--use_fsdp``),
    with the launcher's ``FSDP_*`` settings filling the fields the caller left unset.

    The result is a copy; the caller's plugin stays as they built it.
    """
    from accelerate.backends.fsdp.launch import plugin_with_launch_env
    from accelerate.backends.fsdp.plugin import FullyShardedDataParallelPlugin

    if plugin is None and not launch.use_fsdp:
        return None
    if plugin is not None and not isinstance(plugin, FullyShardedDataParallelPlugin):
        raise TypeError(
            f"Accelerator(fsdp_plugin=...) needs a FullyShardedDataParallelPlugin, got {type(plugin).__name__}."
        )
    return plugin_with_launch_env(plugin if plugin is not None else FullyShardedDataParallelPlugin(), launch)


class FSDPSpec(BackendSpec):
    label = "FSDP"

    def plugin(self, request: BackendRequest) -> Any:
        return resolve_fsdp_plugin(request.given("fsdp_plugin"), request.launch)

    def runs(self, context: BuildContext) -> bool:
        return context.plugins.get("fsdp") is not None and context.partial.use_distributed

    def strategy(self, context: BuildContext) -> Strategy:
        from accelerate.backends.fsdp.strategy import FSDPStrategy

        return FSDPStrategy(
            context.partial.device,
            context.plugins["fsdp"],
            mixed_precision=context.mixed_precision,
            num_processes=context.partial.num_processes,
            num_processes_per_node=context.partial.num_processes_per_node,
        )

    def describe(self, plugin: Any, strategy: Strategy, *, sharded: bool) -> dict[str, Any]:
        # When FSDP shards, the run records the strategy's own copy, so edits through
        # AcceleratorState().fsdp_plugin reach the engine (as upstream).
        return {
            "fsdp_plugin": getattr(strategy, "plugin", plugin) if sharded else plugin,
            "is_fsdp2": sharded,
        }


spec = FSDPSpec()
