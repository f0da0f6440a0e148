"""``BnbQuantizationConfig``: how :func:`load_and_quantize_model` quantizes a model with bitsandbytes.

Pure data, checked when built: one of 8-bit (LLM.int8) or 4-bit (fp4 / nf4) is chosen, and dtype
names ("fp32", "fp16", "bf16") become torch dtypes, so every later reader sees torch dtypes.
Its public home is ``accelerate.utils.dataclasses`` (a lazy re-export).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, fields
from typing import Any

# The dtype names the config accepts besides torch dtypes (bitsandbytes' own vocabulary, not
# accelerate's mixed-precision modes).
_DTYPE_NAMES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
QUANT_TYPES = ("fp4", "nf4")


def _as_torch_dtype(owner: str, name: str, value: Any) -> Any:
    import torch

    if isinstance(value, torch.dtype):
        return value
    if isinstance(value, str) and value in _DTYPE_NAMES:
        return getattr(torch, _DTYPE_NAMES[value])
    raise ValueError(
        f"{owner}({name}={value!r}) must be a torch dtype or one of {', '.join(map(repr, _DTYPE_NAMES))}."
    )


@dataclass
class BnbQuantizationConfig:
    """How ``load_and_quantize_model`` quantizes linear layers with bitsandbytes.

    Choose exactly one of ``load_in_8bit`` (LLM.int8: int8 weights, activations above
    ``llm_int8_threshold`` computed in 16-bit) or ``load_in_4bit`` (``bnb_4bit_quant_type`` "fp4" or
    "nf4", optionally ``bnb_4bit_use_double_quant`` to quantize the scales too, computing in
    ``bnb_4bit_compute_dtype``).

    ``torch_dtype`` is the dtype of the layers that stay unquantized (None keeps the dtype the
    weights are loaded in). ``skip_modules`` are module names left unquantized (default: the output
    head and tied weights, see ``get_keys_to_not_convert``); ``keep_in_fp32_modules`` are left
    unquantized and kept in float32. Dtypes may be given as "fp32" / "fp16" / "bf16" or torch dtypes;
    after construction they are torch dtypes.

    Example:
        >>> BnbQuantizationConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype="bf16")
    """

    load_in_8bit: bool = field(default=False, metadata={"help": "quantize linear layers to int8 (LLM.int8)"})
    llm_int8_threshold: float = field(
        default=6.0, metadata={"help": "outlier threshold of LLM.int8 (8-bit only)"}
    )
    load_in_4bit: bool = field(default=False, metadata={"help": "quantize linear layers to 4 bits"})
    bnb_4bit_quant_type: str = field(default="fp4", metadata={"help": "4-bit data type: 'fp4' or 'nf4'"})
    bnb_4bit_use_double_quant: bool = field(
        default=False, metadata={"help": "quantize the 4-bit quantization constants again"}
    )
    bnb_4bit_compute_dtype: Any = field(
        default="fp16", metadata={"help": "dtype the 4-bit layers compute in: 'fp32', 'fp16' or 'bf16'"}
    )
    torch_dtype: Any = field(default=None, metadata={"help": "dtype of the layers left unquantized"})
    skip_modules: list[str] | None = field(default=None, metadata={"help": "module names left unquantized"})
    keep_in_fp32_modules: list[str] | None = field(
        default=None, metadata={"help": "module names left unquantized and kept in float32"}
    )

    def __post_init__(self) -> None:
        owner = type(self).__name__
        for name in ("load_in_8bit", "load_in_4bit", "bnb_4bit_use_double_quant"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{owner}({name}={getattr(self, name)!r}) must be True or False.")
        if self.load_in_8bit and self.load_in_4bit:
            raise ValueError(
                f"{owner}: load_in_8bit=True and load_in_4bit=True were both given; choose one of them, not both."
            )
        if not self.load_in_8bit and not self.load_in_4bit:
            raise ValueError(
                f"{owner}: neither load_in_8bit nor load_in_4bit is set; pass load_in_8bit=True or load_in_4bit=True."
            )
        if isinstance(self.llm_int8_threshold, bool) or not isinstance(self.llm_int8_threshold, (int, float)):
            raise TypeError(f"{owner}(llm_int8_threshold={self.llm_int8_threshold!r}) must be a number.")
        if self.bnb_4bit_quant_type not in QUANT_TYPES:
            raise ValueError(
                f"{owner}(bnb_4bit_quant_type={self.bnb_4bit_quant_type!r}) must be one of "
                f"{', '.join(map(repr, QUANT_TYPES))}."
            )
        self.bnb_4bit_compute_dtype = _as_torch_dtype(
            owner, "bnb_4bit_compute_dtype", self.bnb_4bit_compute_dtype
        )
        if self.torch_dtype is not None:
            self.torch_dtype = _as_torch_dtype(owner, "torch_dtype", self.torch_dtype)
        for name in ("skip_modules", "keep_in_fp32_modules"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
                raise TypeError(f"{owner}({name}={value!r}) must be a list of module names or None.")
        if self.load_in_4bit and self.llm_int8_threshold != 6.0:
            warnings.warn(
                f"{owner}: llm_int8_threshold only applies to 8-bit loading; it is ignored with load_in_4bit.",
                stacklevel=3,  # the caller building the config (dataclass __init__ -> __post_init__)
            )

    @property
    def target_dtype(self) -> Any:
        """What a quantized weight is stored as, for sizing device maps: int8, or ``CustomDtype.INT4``."""
        import torch

        from accelerate.big_modeling.sizes import CustomDtype

        return torch.int8 if self.load_in_8bit else CustomDtype.INT4

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}
