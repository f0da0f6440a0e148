"""fp8 on a CUDA GPU: this accelerate does not implement fp8 training yet, so where torchao is installed
the check is that asking for it is refused by name (never silently trained in another precision).

Marked ``cuda``: skipped without a GPU (conftest), and skipped with its reason where torchao is absent.
"""

from __future__ import annotations

import importlib.util

import pytest

from accelerate import Accelerator
from accelerate.utils.errors import NotAvailableYetError

pytestmark = pytest.mark.cuda


@pytest.mark.skipif(importlib.util.find_spec("torchao") is None, reason="torchao is not installed")
def test_fp8_with_torchao_installed_is_refused_by_name() -> None:
    with pytest.raises(NotAvailableYetError, match="fp8"):
        Accelerator(mixed_precision="fp8")
