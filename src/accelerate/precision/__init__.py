"""Mixed precision: autocast, fp16 loss scaling and skipped-step detection."""

from accelerate.precision.amp import Precision
from accelerate.utils.fp32_outputs import convert_outputs_to_fp32

__all__ = ["Precision", "convert_outputs_to_fp32"]
