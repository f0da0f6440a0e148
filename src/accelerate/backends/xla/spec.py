"""XLA's row in the backend table: asked on an XLA device, it builds :class:`XLAStrategy` with the
launcher's ``--downcast_bf16`` from the launch settings read once."""

from __future__ import annotations

from typing import TYPE_CHECKING

from accelerate.backends.spec import BackendSpec, BuildContext

if TYPE_CHECKING:
    from accelerate.backends.base import Strategy


class XLASpec(BackendSpec):
    label = "XLA"

    def strategy(self, context: BuildContext) -> Strategy:
        from accelerate.backends.xla.strategy import XLAStrategy

        return XLAStrategy(
            context.partial.device,
            context.partial.num_processes,
            mixed_precision=context.mixed_precision,
            # A launch setting (--downcast_bf16, a config file's downcast_bf16).
            downcast_bf16=bool(context.launch.downcast_bf16),
        )


spec = XLASpec()
