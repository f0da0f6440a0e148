"""A MkDocs hook: reference tables rendered at build time from the objects the code itself uses.

A page writes a marker on a line of its own and the hook replaces it with Markdown:

- ``<!-- generated: cli accelerate -->``: the root command's list of subcommands;
- ``<!-- generated: cli launch -->`` (any subcommand; ``config default`` for a nested one): one table
  per argument group of that subcommand's real argparse parser;
- ``<!-- generated: env -->``: the launcher/runtime environment contract (``ENV_CONTRACT``);
- ``<!-- generated: config-keys -->``: every launch config file key and what it does here (``RULES``);
- ``<!-- generated: public-names -->``: every public name of the user-facing modules, with the first
  line of its docstring and the module that defines it.

Nothing is copied by hand, so the reference cannot drift from the parsers. ``render_marker`` is plain
Python so that tests can call it without MkDocs.
"""

from __future__ import annotations

import argparse
import inspect
import re
from typing import Any

_MARKER = re.compile(r"^<!-- generated: (cli|env|config-keys|public-names)\s*([^>]*?)\s*-->$", re.MULTILINE)


def _cell(text: str) -> str:
    """One table cell: no pipes or newlines, argparse's %(default)s filled in by the caller."""
    return " ".join(text.split()).replace("|", "\\|")


def _subcommand_parser(path: list[str]) -> argparse.ArgumentParser:
    from accelerate.commands.accelerate_cli import build_parser

    parser = build_parser(path[0])
    for name in path:
        subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = subparsers.choices[name]
    return parser


def _option_names(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    names = ", ".join(f"`{name}`" for name in action.option_strings)
    if action.nargs != 0:
        metavar = action.metavar or (
            "{" + ",".join(str(c) for c in action.choices) + "}" if action.choices else action.dest.upper()
        )
        if isinstance(metavar, tuple):
            metavar = " ".join(metavar)
        names += f" `{metavar}`"
    return names.replace("|", "\\|")


def _help(action: argparse.Action) -> str:
    text = action.help or ""
    if "%(" in text:
        try:
            text = text % {**vars(action), "prog": "accelerate"}
        except (KeyError, TypeError, ValueError):
            pass
    return _cell(text)


def _default(action: argparse.Action) -> str:
    if action.nargs == 0 or action.default in (None, argparse.SUPPRESS, False):
        return ""
    return f"`{action.default}`"


def render_cli(path: list[str]) -> str:
    """Markdown for ``accelerate <path...>``: the usage line, then one table per argument group."""
    if path == ["accelerate"]:
        from accelerate.commands.accelerate_cli import COMMANDS

        rows = ["| command | what it does |", "|---|---|"]
        rows += [f"| `accelerate {name}` | {_cell(help_text)} |" for name, (_, help_text) in COMMANDS.items()]
        return "\n".join(rows)
    parser = _subcommand_parser(path)
    out = [f"```text\n{parser.format_usage().strip()}\n```"]
    if parser.description:
        out.append(_cell(parser.description))
    for group in parser._action_groups:
        actions = [
            a
            for a in group._group_actions
            if a.help != argparse.SUPPRESS
            and not isinstance(a, argparse._HelpAction | argparse._SubParsersAction)
        ]
        subcommands = [a for a in group._group_actions if isinstance(a, argparse._SubParsersAction)]
        if not actions and not subcommands:
            continue
        title = group.title or "arguments"
        out.append(f"**{title[0].upper()}{title[1:]}**")
        if group.description:
            out.append(_cell(group.description))
        rows = ["| argument | default | meaning |", "|---|---|---|"]
        for action in actions:
            rows.append(f"| {_option_names(action)} | {_default(action)} | {_help(action)} |")
        for sub in subcommands:
            for choice in sub._choices_actions:
                rows.append(f"| `{choice.dest}` |  | {_cell(choice.help or '')} |")
        out.append("\n".join(rows))
    return "\n\n".join(out)


def render_env() -> str:
    """Markdown for the environment contract between ``accelerate launch`` and the runtime."""
    from accelerate.config.env import ENV_CONTRACT

    rows = ["| variable | type | meaning |", "|---|---|---|"]
    rows += [f"| `{var.name}` | {var.kind} | {_cell(var.help)} |" for var in ENV_CONTRACT]
    return "\n".join(rows)


def render_config_keys() -> str:
    """Markdown: one table per section of the launch config file, from the key table the loader uses."""
    from accelerate.config.keys import RULES

    sections: dict[str, list[str]] = {}
    for rule in RULES:
        section, _, key = rule.key.rpartition(".")
        what = f"sets `{rule.acts}`" if rule.acts and rule.acts.startswith("--") else (rule.acts or "")
        if rule.refusal:
            what = f"refused when set to a value that would change the run: {rule.refusal}"
        sections.setdefault(section, []).append(f"| `{key}` | {_cell(what)} |")
    out = []
    for section, rows in sections.items():
        out.append(f"### `{section}`" if section else "### Top level")
        out.append("\n".join(["| key | what it does here |", "|---|---|", *rows]))
    return "\n\n".join(out)


# The user-facing modules (upstream's paths), in the order a reader meets them.
PUBLIC_MODULES = (
    "accelerate",
    "accelerate.utils",
    "accelerate.state",
    "accelerate.data_loader",
    "accelerate.optimizer",
    "accelerate.scheduler",
    "accelerate.big_modeling",
    "accelerate.hooks",
    "accelerate.inference",
    "accelerate.local_sgd",
    "accelerate.launchers",
    "accelerate.logging",
    "accelerate.tracking",
    "accelerate.checkpointing",
)


def _public_names(module: Any) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is not None:
        return sorted(names)
    # A module without __all__: the names it defines itself, not what it imports.
    return sorted(
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and getattr(value, "__module__", None) == module.__name__
    )


def _kind(value: Any) -> str:
    if inspect.isclass(value):
        return "exception" if issubclass(value, BaseException) else "class"
    if callable(value):
        return "function"
    return "constant"


def _summary(value: Any) -> str:
    if _kind(value) == "constant":
        return ""
    # A class's own docstring only (an Enum of str would otherwise show str's).
    own = vars(value).get("__doc__") if inspect.isclass(value) else value.__doc__
    doc = inspect.cleandoc(own) if isinstance(own, str) else ""
    return _cell(doc.strip().split("\n\n")[0])


def render_public_names() -> str:
    """Markdown: one table per user-facing module, every public name with its summary and home."""
    import importlib

    out = []
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        rows = ["| name | kind | summary | defined in |", "|---|---|---|---|"]
        for name in _public_names(module):
            value = getattr(module, name)
            home = getattr(value, "__module__", None) if _kind(value) != "constant" else None
            rows.append(f"| `{name}` | {_kind(value)} | {_summary(value)} | {f'`{home}`' if home else ''} |")
        out.append(f"## `{module_name}`\n\n" + "\n".join(rows))
    return "\n\n".join(out)


def render_marker(kind: str, argument: str) -> str:
    if kind == "public-names":
        return render_public_names()
    if kind == "env":
        return render_env()
    if kind == "config-keys":
        return render_config_keys()
    return render_cli(argument.split())


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    return _MARKER.sub(lambda m: render_marker(m.group(1), m.group(2)), markdown)
