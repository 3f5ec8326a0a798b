"""The `sluice` console script answers --help and --version."""

from __future__ import annotations

import subprocess
import sys

import pytest
from sluice import __version__
from sluice.cli import COMMANDS, main


def test_version_prints_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"sluice {__version__}"


def test_help_lists_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for name in COMMANDS:
        assert name in out


def test_console_script_runs() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "sluice.cli", "--version"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert __version__ in result.stdout
