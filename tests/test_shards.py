"""``--shard K/N`` (tests/conftest.py): N runs of the shares 1/N .. N/N run each collected test exactly once."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SAMPLE = "tests/test_layout.py"


def collected(*options: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", SAMPLE, "--collect-only", "-q", "-p", "no:cacheprovider",
                           *options], check=False, cwd=ROOT, capture_output=True, text=True, timeout=300)


def node_ids(*options: str) -> list[str]:
    run = collected(*options)
    assert run.returncode == 0, run.stdout + run.stderr
    return [line for line in run.stdout.splitlines() if line.startswith(SAMPLE + "::")]


def test_shares_partition_the_collected_tests_in_turn():
    everything = node_ids()
    assert len(everything) >= 6
    shares = [node_ids("--shard", f"{share}/3") for share in (1, 2, 3)]
    # every third test from the share's own first: interleaved, so each share's size is within one of the others
    for index, share in enumerate(shares):
        assert share == everything[index::3]
    assert sorted(node for share in shares for node in share) == sorted(everything)
    assert node_ids("--shard", "1/1") == everything


@pytest.mark.parametrize("spec", ["0/2", "3/2", "2", "a/b"])
def test_malformed_shares_are_usage_errors(spec):
    run = collected("--shard", spec)
    assert run.returncode == pytest.ExitCode.USAGE_ERROR
    assert "--shard takes K/N" in run.stderr
