"""``crawler simulate`` through Typer's test runner."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from crawler.cli import app

runner = CliRunner()


def test_json_is_one_valid_document() -> None:
    result = runner.invoke(
        app,
        ["simulate", "--env", "A", "--slots", "3000", "-s", "uniform", "-s", "optimal", "--json"],
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert [r["scheduler"] for r in document["runs"]] == ["uniform", "optimal"]
    uniform = document["runs"][0]
    assert uniform["summary"]["limit"] == 0.5610 or abs(uniform["summary"]["limit"] - 0.561) < 1e-3
    assert len(uniform["series"]["ratio"]) == 3
    assert document["env"]["name"] == "A"


def test_table_output_and_params() -> None:
    result = runner.invoke(
        app,
        [
            "simulate",
            "--env",
            "service",
            "--slots",
            "2000",
            "-s",
            "uniform",
            "--param",
            "realization=sampling",
            "--jobs",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "2nd half" in result.stdout
    assert "realization=sampling" in result.stdout


def test_plot_writes_a_png(tmp_path: Path) -> None:
    target = tmp_path / "ratio.png"
    result = runner.invoke(
        app, ["simulate", "--slots", "2000", "-s", "uniform", "--plot", str(target), "--json"]
    )
    assert result.exit_code == 0, result.output
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    json.loads(result.stdout)


def test_custom_environment() -> None:
    result = runner.invoke(
        app,
        [
            "simulate",
            "--env",
            "custom",
            "--n",
            "40",
            "--capacity",
            "2",
            "--alpha",
            "0.5",
            "--beta",
            "1",
            "--model",
            "disappear",
            "--slots",
            "1000",
            "-s",
            "uniform",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    env = json.loads(result.stdout)["env"]
    assert (env["n"], env["capacity"], env["model"]) == (40, 2.0, "disappear")


def test_errors_are_one_clear_line() -> None:
    cases = {
        ("--env", "nowhere"): "unknown environment 'nowhere'",
        ("-s", "nosuch"): "unknown scheduler 'nosuch'",
        ("-s", "uniform", "--param", "N"): "bad --param",
        ("-s", "uniform", "--param", "N=3"): "takes a parameter 'N'",
        ("--model", "vanish"): "unknown change model",
    }
    for args, message in cases.items():
        result = runner.invoke(app, ["simulate", "--slots", "100", *args])
        assert result.exit_code != 0, args
        assert message in result.stderr, (args, result.stderr)
        assert result.stdout == ""
        assert len(result.stderr.strip().splitlines()) == 1
