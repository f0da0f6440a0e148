"""A breakpoint any process can raise and every process sees (``set_trigger`` / ``check_trigger``).

One process sets the flag (say, its loss went NaN); at the next ``check`` every process learns of it
through one all-reduce and can leave the loop together, instead of the others waiting forever.
"""

from __future__ import annotations

import torch

from accelerate.collectives import operations as collectives


class ProcessTrigger:
    """The flag: a one-element tensor on this process's device, summed across processes on check."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.flag_tensor: torch.Tensor | None = None

    def set(self) -> None:
        """Raises the flag on this process (seen by all at the next :meth:`check`)."""
        self.flag_tensor = torch.tensor(1, device=self.device)

    def check(self) -> bool:
        """True on every process when any process set the flag since the last check (then clears it).

        Every process must call it at the same point: it is a collective.
        """
        if self.flag_tensor is None:
            self.flag_tensor = torch.tensor(0, device=self.device)
        total = collectives.reduce(self.flag_tensor, reduction="sum")
        if int(total.item()) >= 1:
            self.flag_tensor = None
            return True
        return False
