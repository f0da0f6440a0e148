"""A benchmark that breaks says so (and fails `make bench`), unlike one whose dependency is missing.

The DeepSpeed row once read "not available" for weeks because its worker called the shared
interleaving with an old signature; a broken worker must not look like a missing package.
"""

from __future__ import annotations

import pytest
from bench.common import FAILED, guarded


def test_a_missing_dependency_is_a_skip_and_a_broken_benchmark_is_a_failure() -> None:
    def missing() -> list:  # type: ignore[type-arg]
        raise ImportError("No module named 'deepspeed'")

    def broken() -> list:  # type: ignore[type-arg]
        raise RuntimeError(
            "torchrun exited with 1:\nTypeError: run() missing 2 required positional arguments\n====="
        )

    assert guarded("deepspeed", "m", missing)[0].note == "not available: No module named 'deepspeed'"
    note = guarded("deepspeed", "m", broken)[0].note
    assert note.startswith(FAILED) and "TypeError: run() missing" in note


def test_run_all_exits_non_zero_when_a_benchmark_failed(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import bench.run_all as run_all

    class Broken:
        __name__ = "bench.broken"

        @staticmethod
        def run() -> list:  # type: ignore[type-arg]
            raise RuntimeError("worker crashed")

    monkeypatch.setattr(run_all, "BENCHMARKS", [Broken])
    monkeypatch.setattr(run_all, "write_results", lambda rows, name, seconds: tmp_path / "latest.json")
    monkeypatch.setattr(run_all, "ROOT", tmp_path)
    with pytest.raises(SystemExit, match="(?i)broken"):
        run_all.main()
