"""``python -m rl_triton`` and ``python -m rl_triton bench`` as a user meets them: option values that cannot
work are named in one line (exit 2) before anything runs, a configuration whose inputs cannot be made is a
failed row (exit 1) while the others run, and a CPU run writes its results without GPU-only figures."""

from __future__ import annotations

import argparse
import dataclasses
import json

import pytest
import torch

from rl_triton import _bench, _demo
from rl_triton.__main__ import main


@pytest.mark.parametrize("text, shapes", [
    ("4096x128", [(4096, 128)]),
    ("1x2**24, 8X2**21", [(1, 2**24), (8, 2**21)]),
    ("2**0x1", [(1, 1)]),
    ("4096 x 128", [(4096, 128)]),
    ("1x2**62", [(1, 2**62)]),
])
def test_shapes_are_read(text, shapes):
    assert _bench.parse_shapes(text) == shapes


@pytest.mark.parametrize("text, message", [
    ("-1x10", "at least 1"), ("4x0", "at least 1"), ("0x10", "at least 1"), ("4x2**-1", "expected rows x steps"),
    ("4096x", "expected rows x steps"), ("ax3", "expected rows x steps"), ("4096", "expected rows x steps"),
    ("4x4x4", "expected rows x steps"), ("4x8,", "expected rows x steps"), ("", "expected rows x steps"),
    # malformed powers, and sizes past int64, named before any power is computed
    ("2**x8", "expected rows x steps"), ("-2**2x4", "expected rows x steps"), ("2**100x2", "up to 2\\*\\*62"),
    ("1x2**1000000", "up to 2\\*\\*62"), ("1x10**100000000", "up to 2\\*\\*62"), ("1x2**63", "up to 2\\*\\*62"),
])
def test_shapes_that_cannot_run_are_named(text, message):
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        _bench.parse_shapes(text)


@pytest.mark.parametrize("arguments, message", [
    (["bench", "--shapes=-1x10"], "argument --shapes: invalid shape '-1x10'"),
    (["bench", "--out="], "argument --out: expected a folder"),
    (["bench", "--seed", str(2**64)], "argument --seed: expected an integer in"),
    (["bench", "--seed", "-1"], "argument --seed: expected an integer in"),
    (["bench", "--seed", "abc"], "argument --seed: expected an integer in [0, 2**64), got 'abc'"),
    (["bench", "--bogus"], "python -m rl_triton bench: error: unrecognized arguments: --bogus"),
    (["demo", "--bogus"], "python -m rl_triton demo: error: unrecognized arguments: --bogus"),
])
def test_option_values_that_cannot_work_exit_with_one_line(capsys, arguments, message):
    with pytest.raises(SystemExit) as raised:
        main(arguments)
    assert raised.value.code == 2
    assert message in capsys.readouterr().err


def test_unknown_estimators_and_an_output_folder_that_is_a_file_stop_before_the_run(capsys, tmp_path):
    assert main(["bench", "--estimators=", "--shapes", "2x8", "--out", str(tmp_path)]) == 2
    assert "unknown estimator(s) ['']" in capsys.readouterr().err
    a_file = tmp_path / "results"
    a_file.write_text("")
    assert main(["bench", "--estimators", "gae", "--shapes", "2x8", "--out", str(a_file)]) == 2
    captured = capsys.readouterr()
    assert f"--out {a_file}: cannot make that folder" in captured.err
    assert "benchmark on" not in captured.out


def test_an_output_folder_that_cannot_take_the_results_stops_before_the_run(capsys, tmp_path, monkeypatch):
    (tmp_path / "results.json").mkdir()
    assert main(["bench", "--estimators", "gae", "--shapes", "2x8", "--out", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert f"--out {tmp_path}: {tmp_path / 'results.json'} is a folder" in captured.err
    assert "benchmark on" not in captured.out

    # a folder that exists but cannot be written (a read-only file system, or no permission)
    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(_bench.tempfile, "NamedTemporaryFile", refuse)
    writable = tmp_path / "writable"
    assert main(["bench", "--estimators", "gae", "--shapes", "2x8", "--out", str(writable)]) == 2
    captured = capsys.readouterr()
    assert f"--out {writable}: cannot write there (Permission denied)" in captured.err
    assert "benchmark on" not in captured.out


@pytest.fixture
def on_cpu(monkeypatch):
    """The benchmark's CPU run, on any machine."""
    monkeypatch.setattr(_bench, "best_device", lambda: torch.device("cpu"))


def test_a_cpu_run_writes_its_rows_without_gpu_figures(on_cpu, tmp_path, capsys):
    out = tmp_path / "nested" / "results"
    assert main(["bench", "--estimators", "gae,prefix-sum", "--shapes", "3x40", "--no-baselines",
                 "--out", str(out)]) == 0
    written = json.loads((out / "results.json").read_text())
    assert written["meta"]["copy_ceiling_gbps"] is None
    assert written["meta"]["seed"] == 0
    assert written["meta"]["timing"]["full_call_us"].startswith("wall clock")
    rows = written["results"]
    assert [(row["estimator"], row["shape"], row["passed"]) for row in rows] == [
        ("gae", "3x40", True), ("prefix-sum", "3x40", True)]
    assert all(row["rel_error"] <= _bench.FLOAT32_TOLERANCE and row["full_call_us"] > 0 for row in rows)
    header = (out / "results.csv").read_text().splitlines()[0].split(",")
    assert header[:5] == ["date", "device", "torch", "triton", "copy_ceiling_gbps"]
    assert "wrote" in capsys.readouterr().out


def test_the_yardstick_is_timed_with_and_without_a_new_output(on_cpu, tmp_path, monkeypatch):
    # torch.add(out=) writes a buffer it is given; the estimators allocate their outputs, as torch.add(a, b) does
    monkeypatch.setattr(_bench, "baseline_implementations", lambda device: {})
    assert main(["bench", "--estimators", "gae", "--shapes", "3x40", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "results.json").read_text())["results"]
    assert [(row["estimator"], row["implementation"], row["passed"]) for row in rows] == [
        ("gae", "rl_triton", True), ("torch.add", "pytorch", True), ("torch.add", "pytorch (new output)", True)]
    assert all(row["pipelined_us"] > 0 and row["min_bytes"] == 3 * 3 * 40 * 4 for row in rows[1:])


def test_inputs_that_cannot_be_made_fail_their_row_and_the_others_run(on_cpu, tmp_path, monkeypatch, capsys):
    def no_memory(*arguments, **keywords):
        raise MemoryError("can't allocate memory")

    broken = dataclasses.replace(_demo.ESTIMATORS["gae"], make_inputs=no_memory)
    monkeypatch.setitem(_bench.ESTIMATORS, "gae", broken)
    assert main(["bench", "--estimators", "gae,prefix-sum", "--shapes", "2x8", "--no-baselines",
                 "--out", str(tmp_path)]) == 1
    rows = json.loads((tmp_path / "results.json").read_text())["results"]
    assert [(row["estimator"], row["passed"]) for row in rows] == [("gae", False), ("prefix-sum", True)]
    assert rows[0]["note"] == "MemoryError: can't allocate memory"
    assert "1 configuration(s) failed" in capsys.readouterr().out


@pytest.mark.parametrize("value, announced", [("1", True), ("false", False)])
def test_the_demonstration_says_when_the_data_checks_ran(monkeypatch, capsys, value, announced):
    monkeypatch.setenv("RL_TRITON_CORRECTNESS_WARNINGS", value)
    monkeypatch.setattr(_demo, "DEMO_ESTIMATORS", ("gae",))
    assert main([]) == 0
    printed = capsys.readouterr().out
    assert "gae" in printed
    assert ("RL_TRITON_CORRECTNESS_WARNINGS: every call also checked its data" in printed) == announced
