"""Slurm's compressed host lists: expansion, its errors, and scontrol for what it cannot read."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from accelerate.launch.hostlist import HostListError, expand_hostlist, slurm_hosts


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("gpu[01-03,07],cpu5", ["gpu01", "gpu02", "gpu03", "gpu07", "cpu5"]),
        ("node1", ["node1"]),
        ("a[8-10]", ["a8", "a9", "a10"]),
        ("a[08-10]", ["a08", "a09", "a10"]),
        ("x[001-002]-ib", ["x001-ib", "x002-ib"]),
        ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
        (" a , b[3] ", ["a", "b3"]),
        ("node-a,node-b", ["node-a", "node-b"]),
    ],
)
def test_host_lists_expand(text: str, hosts: list[str]) -> None:
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("gpu[01-03", "leaves a bracket open"),
        ("gpu]1", "closes a bracket"),
        ("gpu[a-b]", "must hold numbers"),
        ("gpu[1-]", "must hold numbers"),
        ("gpu[5-3]", "runs backwards"),
        ("gpu[1[2]]", "nests brackets"),
        ("", "names no host"),
        (" , ", "names no host"),
        ("n[0-99999999]", "longer than any cluster"),
    ],
)
def test_bad_host_lists_say_why(text: str, why: str) -> None:
    with pytest.raises(HostListError, match=why):
        expand_hostlist(text)


def test_scontrol_expands_what_the_parser_refuses(tmp_path: Path) -> None:
    scontrol = tmp_path / "scontrol"
    scontrol.write_text('#!/bin/sh\n[ "$1 $2" = "show hostnames" ] && printf "weird1\\nweird2\\n"\n')
    scontrol.chmod(scontrol.stat().st_mode | stat.S_IEXEC)
    assert slurm_hosts("weird[1-2;x]", which=lambda name: str(scontrol)) == ["weird1", "weird2"]
    assert slurm_hosts("gpu[1-2]", which=lambda name: str(scontrol)) == ["gpu1", "gpu2"]  # parsed here first
    with pytest.raises(HostListError, match="scontrol is not installed"):
        slurm_hosts("weird[1-2;x]", which=lambda name: None)
