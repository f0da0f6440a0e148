"""``TorchDynamoPlugin``: the ``torch.compile`` settings (upstream's path: ``accelerate.utils.dataclasses``).

It lives beside the env contract because, as upstream, it fills the fields it was not given from the
launcher's ``ACCELERATE_DYNAMO_*`` variables when it is built (:func:`accelerate.config.env.dynamo_defaults`):
a ``TorchDynamoPlugin()`` made inside ``accelerate launch --dynamo_backend inductor`` has the
launcher's backend, and one made outside a launch has upstream's defaults (no compilation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from accelerate.utils.dataclasses import KwargsHandler
from accelerate.utils.enums import DynamoBackend


def _launcher_defaults() -> dict[str, object]:
    from accelerate.config.env import dynamo_defaults

    return dynamo_defaults()


@dataclass
class TorchDynamoPlugin(KwargsHandler):
    """``torch.compile`` settings for the models ``prepare`` returns.

    Fields left at ``None`` take the launcher's settings (``accelerate launch --dynamo_backend ...``),
    else upstream's defaults: backend ``"no"`` (no compilation), mode ``"default"``, ``fullgraph`` and
    ``use_regional_compilation`` False, ``dynamic`` None (torch decides). ``options`` and ``disable``
    go to ``torch.compile`` as they are. A backend upstream's ``DynamoBackend`` names becomes that
    member; another name torch knows stays as given.

    Example:
        >>> Accelerator(dynamo_plugin=TorchDynamoPlugin(backend="inductor", mode="reduce-overhead"))
    """

    backend: DynamoBackend | str | None = None
    mode: str | None = None
    fullgraph: bool | None = None
    dynamic: bool | None = None
    options: Any = None
    disable: bool = False
    use_regional_compilation: bool | None = None

    def __post_init__(self) -> None:
        # Whether the backend was given (not filled in): an Accelerator(dynamo_backend=...) fills only that.
        self._backend_given = self.backend is not None
        for name, value in _launcher_defaults().items():
            if getattr(self, name) is None:
                setattr(self, name, value)
        backend = str(self.backend if self.backend is not None else "no")
        self.backend = DynamoBackend(backend.upper()) if backend.upper() in DynamoBackend else backend
        if self.mode is None:
            self.mode = "default"
        if self.fullgraph is None:
            self.fullgraph = False
        if self.use_regional_compilation is None:
            self.use_regional_compilation = False

    @property
    def enabled(self) -> bool:
        return self.backend is not None and str(self.backend).lower() != "no"

    def to_kwargs(self) -> dict[str, Any]:
        """The ``torch.compile`` keyword arguments (only those set)."""
        kwargs: dict[str, Any] = {"backend": str(self.backend or "no").lower()}
        for name in ("mode", "fullgraph", "dynamic", "options"):
            value = getattr(self, name)
            if value is not None:
                kwargs[name] = value
        if self.disable:
            kwargs["disable"] = True
        return kwargs


# The name this package used before upstream's; kept so existing code runs.
DynamoPlugin = TorchDynamoPlugin
