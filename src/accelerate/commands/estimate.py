"""``accelerate estimate-memory``: how much memory a model needs, without downloading or allocating it.

The model is built from its config on the meta device (``init_empty_weights``), in float32, so only
the config is read; sizes come from the parameters' shapes. Upstream's functions are here under their
names (``estimate_command_parser``, ``gather_data``, ``estimate_command``, ``create_empty_model``, ...).
Besides a model id on the Hub, a local folder holding a ``config.json`` (or that file) works offline.
The run options (world size, parallel sizes, precision, optimizer, batch...) print the per-rank
estimate of :mod:`accelerate.planning` instead (see :mod:`accelerate.commands.estimate_run`).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

HELP = "Estimate the memory a model needs to load and to train, from its config alone."
DTYPES = ["float32", "float16", "int8", "int4"]
# Accepted as well (not upstream's): the same sizes as float16.
EXTRA_DTYPES = ["bfloat16"]
# Divisor of each dtype's size relative to float32.
_DIVISOR = {"float32": 1, "float16": 2, "bfloat16": 2, "int8": 4, "int4": 8}
HEADERS = ["dtype", "Largest Layer", "Total Size", "Training using Adam"]


class EstimateError(Exception):
    """The model could not be built; the message says why and what to do."""


class HubUnreachableError(EstimateError, ConnectionError):
    """The Hugging Face Hub could not be asked about a model (offline, DNS, proxy)."""


def estimate_command_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    """The ``estimate-memory`` parser: a subcommand of ``subparsers``, or a standalone parser."""
    description = HELP + (" Training assumes Adam: fp32 weights, gradients and two optimizer states. "
                          "Activations are not counted.")  # fmt: skip
    if subparsers is not None:
        parser: argparse.ArgumentParser = subparsers.add_parser(
            "estimate-memory", help=HELP, description=description, allow_abbrev=False
        )
    else:
        parser = argparse.ArgumentParser(prog="accelerate estimate-memory", description=description)
    parser.add_argument("model_name", type=str, help="A model id on the Hub (needs the network), a local folder "
                        "holding its config.json, that config.json itself, a .safetensors checkpoint (or a folder "
                        "of them), or module:function returning a model built on the meta device.")  # fmt: skip
    parser.add_argument("--library_name", "--library-name", dest="library_name", type=str,
                        choices=["timm", "transformers"], default=None,
                        help="Library the model belongs to, needed when the Hub does not record it "
                        "(default: transformers for a local config).")  # fmt: skip
    parser.add_argument("--dtypes", type=str, nargs="+", choices=DTYPES + EXTRA_DTYPES, default=list(DTYPES),
                        help="Precisions to report (default: float32 float16 int8 int4).")  # fmt: skip
    parser.add_argument("--trust_remote_code", "--trust-remote-code", dest="trust_remote_code",
                        action="store_true", default=False,
                        help="Allow a transformers model defined by code in its repository.")  # fmt: skip
    from accelerate.commands.estimate_run import add_run_arguments

    add_run_arguments(parser)
    if subparsers is not None:
        parser.set_defaults(func=run)
    return parser


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Registers ``estimate-memory`` on the ``accelerate`` root parser."""
    return estimate_command_parser(subparsers)


def model_info(repo_id: str, token: str | None = None) -> Any:
    """``huggingface_hub.model_info`` (imported on first use; tests and callers may patch this name)."""
    from huggingface_hub import model_info as hub_model_info

    return hub_model_info(repo_id, token=token)


def _ask_hub(repo: str, token: str | None) -> tuple[Any, Exception | None]:
    """``(info, None)``, or ``("gated" | "repo", the Hub's error)``; network failures raise a clear error."""
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    try:
        return model_info(repo, token=token), None
    except GatedRepoError as error:  # a subclass of RepositoryNotFoundError: test it first
        return "gated", error
    except RepositoryNotFoundError as error:
        return "repo", error
    except OSError as error:  # upstream's answer for an unauthorized or unreadable repository
        if isinstance(error, ConnectionError):
            raise _unreachable(repo, error) from error
        return "gated", error
    except Exception as error:  # httpx/requests transport errors are not OSErrors in every version
        if type(error).__name__ in ("ConnectError", "ConnectTimeout", "NetworkError", "TransportError",
                                    "OfflineModeIsEnabled", "Timeout", "ReadTimeout", "ProxyError"):  # fmt: skip
            raise _unreachable(repo, error) from error
        raise


def _unreachable(repo: str, error: Exception) -> HubUnreachableError:
    return HubUnreachableError(
        f"cannot read `{repo}` from the Hugging Face Hub: it could not be reached ({error}). Connect to the "
        "network, or pass a local folder holding the model's config.json (with --library_name transformers)"
    )


def verify_on_hub(repo: str, token: str | None = None) -> Any:
    """The Hub's model info for ``repo``; ``"gated"`` when it cannot be read, ``"repo"`` when it does not exist.

    Raises:
        HubUnreachableError: the Hub could not be reached at all (offline).
    """
    return _ask_hub(repo, token)[0]


def check_has_model(error: BaseException) -> str:
    """The library (``"timm"``, ``"transformers"``) whose "no such model" error ``error`` is, else ``"unknown"``."""
    message = str(error.args[0]) if error.args else ""
    if isinstance(error, RuntimeError) and "Unknown model" in message and _importable("timm"):
        return "timm"
    if (
        isinstance(error, OSError)
        and "does not appear to have a file named" in message
        and _importable("transformers")
    ):
        return "transformers"
    return "unknown"


def _importable(name: str) -> bool:
    from importlib.util import find_spec

    return find_spec(name) is not None


def _is_local_config(model_name: str) -> bool:
    return os.path.isfile(os.path.join(model_name, "config.json")) or (
        os.path.isfile(model_name) and model_name.endswith(".json")
    )


def _hub_error(kind: str, model_name: str, error: Exception | None) -> Exception:
    """The Hub's own error class (GatedRepoError / RepositoryNotFoundError) with upstream's message."""
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    if kind == "gated":
        cls: type[Any] = GatedRepoError
        message = (f"Repo for model `{model_name}` is gated. You must be authenticated to access it. "
                   "Please run `hf auth login`.")  # fmt: skip
    else:
        cls = RepositoryNotFoundError
        message = (f"Repo for model `{model_name}` does not exist on the Hub. If you are trying to access a "
                   "private repo, make sure you are authenticated via `hf auth login` and have access.")  # fmt: skip
    response = getattr(error, "response", None)
    try:
        built: Exception = cls(message, response=response) if response is not None else cls(message)
    except TypeError:  # this huggingface_hub needs a response to build its errors
        return EstimateError(message)
    return built


def create_empty_model(
    model_name: str,
    library_name: str | None,
    trust_remote_code: bool = False,
    access_token: str | None = None,
) -> Any:
    """``model_name`` built in float32 on the meta device (no weights read or allocated).

    Args:
        model_name: A model id on the Hub, or a local folder holding a ``config.json`` (or that file).
        library_name: ``"transformers"`` or ``"timm"``; ``None`` takes the library the Hub records
            (``transformers`` for a local config).
        trust_remote_code: Allow a model defined by code in its repository.
        access_token: Token for private or gated repositories.

    Raises:
        GatedRepoError / RepositoryNotFoundError: the repository cannot be read / does not exist.
        HubUnreachableError: the Hub is needed and cannot be reached.
        ValueError: no library is known for the model, or it is not supported.

    Example:
        >>> model = create_empty_model("./my-model", library_name="transformers")  # doctest: +SKIP
    """
    info: Any = None
    if _is_local_config(model_name):
        library_name = library_name or "transformers"
    else:
        info, error = _ask_hub(model_name, access_token)
        if isinstance(info, str):
            raise _hub_error(info, model_name, error)
        if library_name is None:
            library_name = getattr(info, "library_name", None) or None
            if not library_name:
                raise ValueError(f"Model `{model_name}` does not have any library metadata on the Hub, please "
                                 "manually pass in a `--library_name` to use (such as `transformers`)")  # fmt: skip
    if library_name == "transformers":
        return _empty_transformers_model(model_name, info, trust_remote_code, access_token)
    if library_name == "timm":
        try:
            import timm
        except ImportError as error:
            raise ImportError(f"To check `{model_name}`, `timm` must be installed. Please install it via "
                              "`pip install timm`") from error  # fmt: skip
        from accelerate.big_modeling import init_empty_weights

        print(f"Loading pretrained config for `{model_name}` from `timm`...")
        with init_empty_weights():
            return timm.create_model(model_name, pretrained=False)
    raise ValueError(f"Library `{library_name}` is not supported yet, please open an issue on GitHub for us to "
                     "add support.")  # fmt: skip


def _empty_transformers_model(model_name: str, info: Any, trust_remote_code: bool, token: str | None) -> Any:
    try:
        import torch
        import transformers
    except ImportError as error:
        raise ImportError(f"To check `{model_name}`, `transformers` must be installed. Please install it via "
                          "`pip install transformers`") from error  # fmt: skip
    from accelerate.big_modeling import init_empty_weights

    print(f"Loading pretrained config for `{model_name}` from `transformers`...")
    auto_map: Any = None
    if info is not None:
        if getattr(info, "config", None) is None:
            raise RuntimeError(
                f"Tried to load `{model_name}` with `transformers` but it does not have any metadata."
            )
        auto_map = info.config.get("auto_map")
    config = transformers.AutoConfig.from_pretrained(
        model_name, trust_remote_code=trust_remote_code, token=token
    )
    if auto_map is None:
        auto_map = getattr(config, "auto_map", None)
    constructor: Any = transformers.AutoModel
    if isinstance(auto_map, dict):  # remote code may name its own AutoModelFor... class
        name = next((key for key in auto_map if key.startswith("AutoModelFor")), None)
        if name is not None:
            constructor = getattr(transformers, name)
    with init_empty_weights():
        # float32 whatever dtype the config records: the sizes are scaled per dtype afterwards.
        return constructor.from_config(config, dtype=torch.float32, trust_remote_code=trust_remote_code)


def estimate_training_usage(
    bytes: int,  # noqa: A002 - upstream's parameter name
    mixed_precision: str,
    msamp_config: str | None = None,
) -> dict[str, int]:
    """Memory (bytes) to train a model of ``bytes`` float32 bytes with Adam, batch size 1, activations excluded.

    Keys ``model``, ``optimizer``, ``gradients`` and ``step``; ``-1`` where ``mixed_precision`` has no
    estimate (int8, int4).

    Example:
        >>> estimate_training_usage(1000, "float32")
        {'model': 1000, 'optimizer': 2000, 'gradients': 1000, 'step': 4000}
    """
    sizes = {"model": -1, "optimizer": -1, "gradients": -1, "step": -1}
    half = bytes // 2
    if mixed_precision == "float32":
        sizes.update(model=bytes, gradients=bytes, optimizer=2 * bytes, step=4 * bytes)
    elif mixed_precision in ("float16", "bfloat16") or (mixed_precision == "fp8" and msamp_config is None):
        # Weights kept in fp32 with a half copy; gradients 1.5x; Adam's two fp32 states.
        sizes.update(model=bytes, gradients=bytes + half, optimizer=2 * bytes, step=2 * bytes)
    return sizes


def gather_data(args: argparse.Namespace) -> list[list[Any]]:
    """One row per dtype of ``args.dtypes``: ``[dtype, largest layer bytes, total bytes, training sizes]``."""
    from accelerate.big_modeling.sizes import calculate_maximum_sizes

    try:
        model = create_empty_model(
            args.model_name, library_name=args.library_name, trust_remote_code=args.trust_remote_code
        )
    except (RuntimeError, OSError) as error:
        library = check_has_model(error)
        if library != "unknown":
            raise RuntimeError(f"Tried to load `{args.model_name}` with `{library}` but a possible model to load "
                               "was not found inside the repo.") from error  # fmt: skip
        raise
    total_size, (largest_layer, _) = calculate_maximum_sizes(model)
    rows: list[list[Any]] = []
    for dtype in args.dtypes:
        divisor = _DIVISOR[dtype]
        # float32 stays an int; the others are divided (floats), as upstream reports them.
        total: float = total_size if divisor == 1 else total_size / divisor
        largest: float = largest_layer if divisor == 1 else largest_layer / divisor
        rows.append([dtype, largest, total, estimate_training_usage(total_size, dtype)])
    return rows


def create_ascii_table(headers: list[str], rows: list[list[str]], title: str) -> str:
    """A boxed table: the title on top, then the centred headers and rows (a minimal ``tabulate``).

    Example:
        >>> print(create_ascii_table(["a", "b"], [["1", "22"]], "t"))
        ┌────┐
        │ t  │
        ├─┬──┤
        │a│b │
        ├─┼──┤
        │1│22│
        └─┴──┘
    """
    widths = [
        max(len(str(cell)) for cell in [header, *(row[i] for row in rows)])
        for i, header in enumerate(headers)
    ]
    inner = sum(widths) + len(widths) - 1
    if len(title) > inner:  # the last column takes the title's extra width
        widths[-1] += len(title) - inner
        inner = len(title)

    def rule(left: str, middle: str, right: str) -> str:
        return left + middle.join("─" * width for width in widths) + right

    def line(cells: list[str]) -> str:
        return (
            "│" + "│".join(str(cell).center(width) for cell, width in zip(cells, widths, strict=True)) + "│"
        )

    out = ["┌" + "─" * inner + "┐", "│" + title.center(inner) + "│", rule("├", "┬", "┤"), line(headers)]
    out.append(rule("├", "┼", "┤"))
    out.extend(line(row) for row in rows)
    out.append(rule("└", "┴", "┘"))
    return "\n".join(out)


def estimate_command(args: argparse.Namespace) -> None:
    """Prints the table of ``gather_data(args)`` (sizes in readable units; "N/A" without a training estimate)."""
    from accelerate.utils.text import convert_bytes

    table: list[list[str]] = []
    for dtype, largest, total, training in gather_data(args):
        most = max(training.values())
        table.append([dtype, convert_bytes(largest), convert_bytes(total),
                      convert_bytes(most) if most != -1 else "N/A"])  # fmt: skip
    print(create_ascii_table(HEADERS, table, f"Memory Usage for loading `{args.model_name}`"))


def run(args: argparse.Namespace) -> int:
    """The CLI: ``estimate_command`` (or the per-rank estimate, given a run option), with a failure
    reported as one line and exit code 2."""
    from accelerate.commands.estimate_run import run_estimate, wants_run_estimate

    try:
        if wants_run_estimate(args):
            print(run_estimate(args))
            return 0
        estimate_command(args)
    except (EstimateError, ImportError, OSError, RuntimeError, ValueError) as error:
        print(f"accelerate estimate-memory: error: {error}", file=sys.stderr)
        return 2
    return 0


def main() -> None:
    """``python -m accelerate.commands.estimate MODEL``."""
    raise SystemExit(run(estimate_command_parser().parse_args()))


if __name__ == "__main__":
    main()
