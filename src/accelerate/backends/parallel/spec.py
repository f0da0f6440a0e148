"""N-D parallelism's row in the backend table: the run's ``ParallelismConfig`` (the script's, the TP
plugin's or the launcher's) is its plugin, and :class:`ParallelStrategy` runs when the config shards
(``dp_shard``/``cp``), splits sequences (``sp``, whose ranks FSDP2 shards over like ``dp_shard``'s) or
splits tensors (``tp``); pure ``dp_replicate`` falls through to DDP.

A new mesh dimension (sequence, expert, pipeline) is a size on ``ParallelismConfig``, a check here
when it cannot run with another backend, and one ``apply_*`` step in the strategy's composition."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from accelerate.backends.spec import BackendRequest, BackendSpec, BuildContext

if TYPE_CHECKING:
    from accelerate.backends.base import Strategy


class ParallelSpec(BackendSpec):
    label = "ParallelismConfig"

    def check(self, request: BackendRequest) -> None:
        config = request.parallelism_config
        check_available = getattr(config, "check_available", None)
        if config is not None and check_available is None:
            raise TypeError(
                f"Accelerator(parallelism_config=...) needs a ParallelismConfig, got {type(config).__name__}."
            )
        if check_available is None:
            return
        # pp and tp are refused below with DeepSpeed asked by an argument; sp's engine also follows the launcher's.
        deepspeed_argument = (
            request.given("deepspeed_plugin") is not None or request.given("deepspeed_plugins") is not None
        )
        deepspeed = deepspeed_argument or bool(request.launch.use_deepspeed)
        resolve_sp = getattr(config, "resolve_sp_backend", None)
        if resolve_sp is not None:
            resolve_sp(deepspeed_engine=deepspeed)  # an unset sp_backend follows the engine, as upstream
        check_available()  # DeepSpeed's Ulysses raises; context parallelism is checked with the device
        if getattr(config, "pp_enabled", False):
            from accelerate.backends.parallel.pipeline import check_pipeline_composition

            check_pipeline_composition(config)  # before the sizes are checked against the world
        if getattr(config, "pp_enabled", False) and deepspeed_argument:
            raise ValueError(
                f"Accelerator got parallelism_config with pp_size={config.pp_size} (pipeline parallelism) and "
                "deepspeed_plugin (DeepSpeed); DeepSpeed's engine runs the whole model's forward and backward "
                "itself and cannot run torch's pipeline schedules. Drop one: pipeline stages compose with "
                "ParallelismConfig's own dimensions, not with DeepSpeed."
            )
        if getattr(config, "tp_enabled", False) and deepspeed_argument:
            raise ValueError(
                f"Accelerator got parallelism_config with tp_size={config.tp_size} (tensor parallelism) and "
                "deepspeed_plugin (DeepSpeed); DeepSpeed shards the model its own way and cannot run on a "
                "tensor-parallel mesh. Drop one: tensor parallelism composes with FSDP (parallelism_config's "
                "dp_shard_size), not with DeepSpeed."
            )

    def plugin(self, request: BackendRequest) -> Any:
        return request.parallelism_config

    def runs(self, context: BuildContext) -> bool:
        config = context.parallelism_config
        return (
            config is not None
            and config.device_mesh is not None
            and bool(config.tp_enabled or config.shard_dim_names or getattr(config, "pp_enabled", False))
        )

    def strategy(self, context: BuildContext) -> Strategy:
        from accelerate.backends.parallel.strategy import ParallelStrategy

        partial = context.partial
        # The FSDP plugin (if any) carries the FSDP settings (mixed precision, resharding, AC); the
        # mesh comes from the config.
        return ParallelStrategy(
            partial.device,
            context.parallelism_config,
            context.plugins.get("fsdp"),
            mixed_precision=context.mixed_precision,
            num_processes=partial.num_processes,
            num_processes_per_node=partial.num_processes_per_node,
            process_type=partial.distributed_type,
        )

    def describe(self, plugin: Any, strategy: Strategy, *, sharded: bool) -> dict[str, Any]:
        # When FSDP2 shards on the mesh, the run's FSDP plugin is the strategy's (its defaults without one).
        return {
            "is_fsdp2": sharded,
            **({"fsdp_plugin": getattr(strategy, "plugin", None)} if sharded else {}),
        }


spec = ParallelSpec()
