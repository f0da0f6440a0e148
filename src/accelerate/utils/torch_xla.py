"""torch_xla set-up at upstream's path.

Installing torch_xla is for a TPU machine (Colab, Kaggle, Cloud TPU) with network access; this
release does not run pip on the user's behalf, so the call raises the one hardware error.
"""

from __future__ import annotations

from typing import Any

from accelerate.utils.errors import hardware_only


@hardware_only("installing torch_xla", "a TPU machine with network access; run `pip install torch_xla` there")
def install_xla(upgrade: bool = False) -> Any: ...
