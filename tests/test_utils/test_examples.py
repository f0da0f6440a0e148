from __future__ import annotations

from pathlib import Path

import pytest

from accelerate.test_utils.examples import clean_lines, compare_against_test, get_function_contents_by_name

PLAIN = """
import argparse


def training_function(config, args):
    accelerator = Accelerator()
    model = build()
    # a comment
    for batch in loader:
        accelerator.backward(model(batch))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cpu", action="store_true")
    training_function({}, parser.parse_args())


if __name__ == "__main__":
    main()
"""

FEATURE = PLAIN.replace(
    "        accelerator.backward(model(batch))\n",
    "        accelerator.backward(model(batch))\n    accelerator.save_state(args.output_dir)\n",
).replace(
    '    parser.add_argument("--cpu", action="store_true")\n',
    '    parser.add_argument("--cpu", action="store_true")\n    parser.add_argument("--output_dir", default=".")\n',
)


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_clean_lines() -> None:
    assert clean_lines(["    a = 1\n", "\n", "   # note\n", "\tb()\n"]) == ["a = 1", "b()"]


def test_get_function_contents_by_name() -> None:
    lines = PLAIN.splitlines(keepends=True)
    body = get_function_contents_by_name(lines, "training_function")
    assert clean_lines(body) == [
        "accelerator = Accelerator()", "model = build()", "for batch in loader:",
        "accelerator.backward(model(batch))",
    ]  # fmt: skip
    assert (
        clean_lines(get_function_contents_by_name(lines, "main"))[-1]
        == "training_function({}, parser.parse_args())"
    )
    with pytest.raises(ValueError, match="'evaluate'"):
        get_function_contents_by_name(lines, "evaluate")


def test_nested_function_body() -> None:
    lines = [
        "class A:\n",
        "    def f(self):\n",
        "        return 1\n",
        "\n",
        "    def g(self):\n",
        "        pass\n",
    ]
    assert get_function_contents_by_name(lines, "f") == ["        return 1\n"]


def test_compare_against_test(tmp_path: Path) -> None:
    plain = _write(tmp_path, "plain.py", PLAIN)
    feature = _write(tmp_path, "feature.py", FEATURE)
    complete = _write(tmp_path, "complete.py", FEATURE)
    # The complete script has the feature: nothing missing, in the training function or the parser.
    assert compare_against_test(complete, feature, parser_only=False) == []
    assert compare_against_test(complete, feature, parser_only=True) == []
    # The plain script lacks exactly the feature's lines.
    assert compare_against_test(plain, feature, parser_only=False) == [
        "accelerator.save_state(args.output_dir)"
    ]
    assert compare_against_test(plain, feature, parser_only=True) == [
        'parser.add_argument("--output_dir", default=".")'
    ]
    # Lines the feature script shares with its plain origin are boilerplate, never reported.
    changed = _write(tmp_path, "changed.py", FEATURE.replace("model = build()", "model = build_bigger()"))
    assert compare_against_test(changed, feature, parser_only=False, secondary_filename=plain) == []
    assert compare_against_test(changed, feature, parser_only=False) == ["model = build()"]


def test_compare_against_test_names_the_file(tmp_path: Path) -> None:
    empty = _write(tmp_path, "empty.py", "x = 1\n")
    feature = _write(tmp_path, "feature.py", FEATURE)
    with pytest.raises(ValueError, match="empty.py"):
        compare_against_test(empty, feature, parser_only=False)
