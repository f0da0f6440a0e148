"""One process on one device: the model is moved, nothing is wrapped. Also the backend table's last row."""

from __future__ import annotations

from accelerate.backends.base import Strategy
from accelerate.backends.spec import BackendSpec, BuildContext


class SingleDeviceStrategy(Strategy):
    name = "single_device"


class SingleDeviceSpec(BackendSpec):
    """The table's last row: asked on every run, it runs when no row before it does."""

    def strategy(self, context: BuildContext) -> Strategy:
        # DDP kwargs are not an error in one process: the same script runs on one process and several.
        return SingleDeviceStrategy(context.partial.device, context.partial.distributed_type)


spec = SingleDeviceSpec()
