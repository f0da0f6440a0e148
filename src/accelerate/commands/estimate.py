"""``accelerate estimate-memory``: how much memory a model needs, without downloading or allocating it.

The model is built from its config on the meta device (``init_empty_weights``), so only the
config is read; sizes come from the parameters' shapes.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

HELP = "Estimate the memory a model needs to load and to train, from its config alone."
DTYPES = ["float32", "float16", "bfloat16", "int8", "int4"]
# Bytes per floating-point element relative to float32.
_SCALE = {"float32": 1.0, "float16": 0.5, "bfloat16": 0.5, "int8": 0.25, "int4": 0.125}


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "estimate-memory",
        help=HELP,
        description=HELP + " Training assumes Adam: fp32 weights, gradients and two optimizer states "
        "(plus the half-precision copy for float16 mixed precision). Activations are not counted.",
        allow_abbrev=False,
    )
    parser.add_argument("model_name", help="A model id on the Hub (needs the network), a local folder holding its "
                        "config.json, or that config.json itself.")  # fmt: skip
    parser.add_argument("--library_name", "--library-name", dest="library_name", choices=["timm", "transformers"],
                        default=None, help="Library the model belongs to (default: transformers for a folder "
                        "with a config.json).")  # fmt: skip
    parser.add_argument("--dtypes", nargs="+", choices=DTYPES, default=list(DTYPES),
                        help="Precisions to report (default: all).")  # fmt: skip
    parser.add_argument("--trust_remote_code", "--trust-remote-code", dest="trust_remote_code", action="store_true",
                        help="Allow a transformers model defined by code in its repository.")  # fmt: skip
    parser.set_defaults(func=run)
    return parser


class EstimateError(Exception):
    """The model could not be built; the message says why and what to do."""


def empty_model(model_name: str, library_name: str | None, trust_remote_code: bool = False) -> Any:
    """``model_name`` built on the meta device (no weights read or allocated)."""
    from accelerate.big_modeling import init_empty_weights

    if library_name is None:
        if os.path.isfile(os.path.join(model_name, "config.json")) or (
            os.path.isfile(model_name) and model_name.endswith(".json")
        ):
            library_name = "transformers"
        else:
            library_name = _hub_library(model_name)
    if library_name == "timm":
        try:
            import timm
        except ImportError as error:
            raise EstimateError("--library_name timm needs timm: pip install timm") from error
        with init_empty_weights():
            return timm.create_model(model_name, pretrained=False)
    try:
        import transformers
    except ImportError as error:
        raise EstimateError("--library_name transformers needs transformers: pip install transformers") from error
    try:
        config = transformers.AutoConfig.from_pretrained(model_name, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as error:
        raise EstimateError(f"cannot read the config of {model_name!r}: {error}") from error
    with init_empty_weights():
        return transformers.AutoModel.from_config(config, trust_remote_code=trust_remote_code)


def _hub_library(model_name: str) -> str:
    """The library the Hub records for ``model_name`` (needs the network)."""
    hint = "pass --library_name transformers or timm (or a local folder with a config.json)"
    try:
        from huggingface_hub import model_info

        library = model_info(model_name).library_name
    except ImportError as error:
        raise EstimateError(f"cannot tell which library {model_name!r} belongs to; {hint}") from error
    except Exception as error:  # offline, unknown repository, gated: the Hub's errors vary by version
        raise EstimateError(
            f"cannot tell which library {model_name!r} belongs to: the Hub could not be asked ({error}); {hint}"
        ) from error
    if library not in ("transformers", "timm"):
        raise EstimateError(f"{model_name!r} is a {library or 'unknown'} model on the Hub; only transformers and timm "
                            "models can be estimated")  # fmt: skip
    return str(library)


def estimate(model: Any, dtypes: list[str]) -> list[dict[str, Any]]:
    """Per dtype: the largest unsplittable layer, the total and the training (Adam) size, in bytes."""
    from accelerate.big_modeling.sizes import calculate_maximum_sizes

    total32, (largest32, names) = calculate_maximum_sizes(model)
    rows = []
    for dtype in dtypes:
        total = int(total32 * _SCALE[dtype])
        training: int | None = None
        if dtype == "float32":
            training = 4 * total32
        elif dtype in ("float16", "bfloat16"):
            training = 4 * total32 + total
        rows.append(
            {"dtype": dtype, "largest_layer": int(largest32 * _SCALE[dtype]), "largest_layer_names": names,
             "total_size": total, "training_with_adam": training}
        )  # fmt: skip
    return rows


def human(size: float | None) -> str:
    if size is None:
        return "N/A"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1024 or unit == "TB":
            return f"{size:.2f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1024
    raise AssertionError("unreachable")


def run(args: argparse.Namespace) -> int:
    try:
        model = empty_model(args.model_name, args.library_name, args.trust_remote_code)
    except EstimateError as error:
        print(f"accelerate estimate-memory: error: {error}", file=sys.stderr)
        return 2
    rows = estimate(model, args.dtypes)
    header = ("dtype", "Largest Layer", "Total Size", "Training using Adam")
    table = [header] + [
        (r["dtype"], human(r["largest_layer"]), human(r["total_size"]), human(r["training_with_adam"])) for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    print(f"Memory usage for loading `{args.model_name}`:")
    for position, row in enumerate(table):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
        if position == 0:
            print("  ".join("-" * width for width in widths))
    return 0
