"""`BackendSpec`: what one backend declares to the resolver, and the records it is handed.

Each backend package exports one ``spec`` (``backends/<name>/spec.py``, or a ``spec`` object in a
one-module backend); ``backends/table.py`` lists them in precedence order and ``backends/resolve.py``
loops over that table. A spec answers five questions, each a method with a default that says "this
backend changes nothing here":

* :meth:`BackendSpec.check`: which argument combinations it refuses, before any process group exists;
* :meth:`BackendSpec.plugin`: its plugin, from the Accelerator's arguments and the launch settings;
* :meth:`BackendSpec.runs` / :meth:`BackendSpec.strategy`: whether its strategy is the run's, and
  which strategy that is;
* :meth:`BackendSpec.adjust_accumulation` and :attr:`BackendSpec.runs_fp8`: what it changes in
  gradient accumulation and precision;
* :meth:`BackendSpec.describe`: the ``RunDescription`` fields its plugin fills.

No torch at import, and no backend: the table imports a spec only for a run that asks for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from accelerate.utils.records import frozen_record

if TYPE_CHECKING:
    from accelerate.backends.base import Strategy
    from accelerate.config.env import LaunchEnv
    from accelerate.state.process import PartialState
    from accelerate.utils.dataclasses import DistributedDataParallelKwargs, GradientAccumulationPlugin


@frozen_record
class BackendRequest:
    """What the run asks of the backends, before any process group exists.

    ``arguments`` holds the Accelerator's backend arguments by name (``None``: not given), ``launch``
    the launch settings read once (``config.env.read_launch_env``), and ``parallelism_config`` the
    run's ParallelismConfig as resolved (the script's, the TP plugin's or the launcher's).
    """

    arguments: Mapping[str, Any]
    launch: LaunchEnv
    parallelism_config: Any = None

    def given(self, name: str) -> Any:
        """The argument ``name`` as the caller passed it (None when not given)."""
        return self.arguments.get(name)


@frozen_record
class BuildContext:
    """What a spec's :meth:`~BackendSpec.runs` and :meth:`~BackendSpec.strategy` see: the process, the
    precision, and the plugin of each backend the run asks for (by table name; None: asked, no plugin)."""

    partial: PartialState
    mixed_precision: str
    plugins: Mapping[str, Any]
    parallelism_config: Any
    ddp_kwargs: DistributedDataParallelKwargs | None
    launch: LaunchEnv


class BackendSpec:
    """One backend's row, as its package declares it. Subclasses override what their backend changes."""

    # Shown in messages ("DeepSpeed", "FSDP"): the name users know.
    label = ""
    # False where fp8 training cannot run with this backend (its engine wraps the model itself).
    runs_fp8 = True

    def check(self, request: BackendRequest) -> None:
        """Raises, naming the arguments, on a combination this backend refuses."""

    def plugin(self, request: BackendRequest) -> Any:
        """This backend's plugin for the run (arguments first, the launch settings for the rest)."""
        return None

    def runs(self, context: BuildContext) -> bool:
        """Whether this backend's strategy is the run's (the table asks rows in order; first wins)."""
        return True

    def strategy(self, context: BuildContext) -> Strategy:
        raise NotImplementedError(f"{type(self).__name__} builds no strategy; the table asks another row.")

    def adjust_accumulation(
        self, plugin: Any, accumulation: GradientAccumulationPlugin, mixed_precision: str
    ) -> GradientAccumulationPlugin:
        """The run's gradient accumulation with this backend (unchanged by default)."""
        return accumulation

    def describe(self, plugin: Any, strategy: Strategy, *, sharded: bool) -> dict[str, Any]:
        """The ``RunDescription`` fields this backend's plugin fills (``sharded``: the strategy shards)."""
        return {}
