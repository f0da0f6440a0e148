"""The documentation site builds with ``mkdocs build --strict``, and its generated reference matches the code.

``--strict`` fails on a broken link or anchor, a page missing from the navigation, and a docstring
that mkdocstrings cannot render. The build needs the ``docs`` extra; without MkDocs it is skipped.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from tests.docs.snippets import REPO

sys.path.insert(0, str(REPO / "docs_hooks"))
import generated_reference  # noqa: E402

sys.path.remove(str(REPO / "docs_hooks"))


def test_site_builds_strict_in_every_language(site: Path) -> None:
    for prefix in ("", "zh/", "hi/"):
        assert (site / prefix / "index.html").is_file(), prefix or "en"
        assert (site / prefix / "get-started/quick-tour/index.html").is_file()
    # A translated page is the translation; an untranslated one falls back to the English text.
    assert 'lang="zh"' in (site / "zh/get-started/quick-tour/index.html").read_text(encoding="utf-8")
    assert "快速上手" in (site / "zh/get-started/quick-tour/index.html").read_text(encoding="utf-8")
    assert "झलक" in (site / "hi/get-started/quick-tour/index.html").read_text(encoding="utf-8")
    assert "Checkpoints and exact resume" in (site / "zh/how-to/checkpoints-and-resume/index.html").read_text(
        encoding="utf-8"
    )


def test_api_pages_render_docstrings(site: Path) -> None:
    page = (site / "reference/api/accelerator/index.html").read_text(encoding="utf-8")
    for method in ("prepare", "backward", "gather_for_metrics", "save_state", "load_state"):
        assert f'id="accelerate.accelerator.Accelerator.{method}"' in page, method


def _launch_parser() -> argparse.ArgumentParser:
    from accelerate.commands.accelerate_cli import build_parser

    root = build_parser("launch")
    sub = next(a for a in root._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["launch"]


def test_cli_reference_lists_every_launch_flag(site: Path) -> None:
    page = (site / "reference/cli/index.html").read_text(encoding="utf-8")
    missing = [
        action.option_strings[0]
        for action in _launch_parser()._actions
        if action.option_strings and action.help != argparse.SUPPRESS and action.option_strings[0] not in page
    ]
    assert not missing, f"flags of `accelerate launch` missing from the CLI reference: {missing}"


def test_generated_reference_renders_every_command_without_mkdocs() -> None:
    from accelerate.commands.accelerate_cli import COMMANDS
    from accelerate.config.env import ENV_CONTRACT
    from accelerate.config.keys import RULES

    overview = generated_reference.render_marker("cli", "accelerate")
    for name in COMMANDS:
        assert f"`accelerate {name}`" in overview
        assert generated_reference.render_marker("cli", name).startswith("```text\nusage: accelerate")
    env = generated_reference.render_marker("env", "")
    assert all(f"`{var.name}`" in env for var in ENV_CONTRACT)
    keys = generated_reference.render_marker("config-keys", "")
    assert all(f"`{rule.key.rsplit('.', 1)[-1]}`" in keys for rule in RULES)
    page = "intro\n<!-- generated: cli to-fsdp2 -->\nend"
    assert "usage: accelerate to-fsdp2" in generated_reference.on_page_markdown(page)


def test_public_names_page_lists_every_exported_name(site: Path) -> None:
    import importlib

    page = (site / "reference/public-names/index.html").read_text(encoding="utf-8")
    for module_name in ("accelerate", "accelerate.utils", "accelerate.data_loader"):
        missing = [n for n in importlib.import_module(module_name).__all__ if f"<code>{n}</code>" not in page]
        assert not missing, f"{module_name}: names missing from the public-names page: {missing}"


def test_every_page_is_in_the_navigation() -> None:
    import yaml

    nav = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    config = yaml.safe_load(nav.replace("!!python/name:", ""))
    listed: set[str] = set()

    def walk(items: list) -> None:
        for item in items:
            for value in item.values() if isinstance(item, dict) else [item]:
                walk(value) if isinstance(value, list) else listed.add(value)

    walk(config["nav"])
    pages = {
        str(p.relative_to(REPO / "docs"))
        for p in (REPO / "docs").rglob("*.md")
        if not p.name.endswith((".zh.md", ".hi.md"))
    }
    assert pages == listed, (
        f"not in nav: {sorted(pages - listed)}; in nav but missing: {sorted(listed - pages)}"
    )


def test_pages_load_nothing_from_another_host(site: Path) -> None:
    # A page read offline, behind a firewall, or from `make docs` output must not wait for a third
    # party (Material's default Google Fonts held every page's load for a DNS timeout where none answers).
    loads = re.compile(
        r"<(?:script|img|iframe)\b[^>]*\bsrc=\"(?:https?:)?//|<link\b[^>]*\bhref=\"(?:https?:)?//"
    )
    outside = {
        str(page.relative_to(site)): found
        for page in site.rglob("*.html")
        if (found := [m.group(0) for m in loads.finditer(page.read_text(encoding="utf-8"))])
    }
    assert not outside, f"pages that load from another host: {dict(list(outside.items())[:3])}"
