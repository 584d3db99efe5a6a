"""``plancast auth init`` writes private files, and never silently replaces passwords."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from runtime.bus import CONF_FILE, UserCreds, creds_file, read_creds
from runtime.cli import app

TEAM = """
[models.m]
model = "m"
[roles.planner]
kind = "planner"
model = "m"
[roles.coder]
model = "m"
[roles.synthesizer]
kind = "synthesizer"
model = "m"
"""


def test_auth_init_writes_a_user_per_role_readable_by_its_owner(tmp_path: Path) -> None:
    team = tmp_path / "team.toml"
    team.write_text(TEAM)
    runner = CliRunner()
    out = tmp_path / "auth"
    result = runner.invoke(app, ["auth", "init", str(out), "--team", str(team)])
    assert result.exit_code == 0, result.output
    users = {p.stem for p in out.glob("*.json")}
    assert users == {"admin", "planner", "coder", "synthesizer", "client", "watcher"}
    for path in out.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    coder = read_creds(creds_file(out, "coder"))
    assert coder is not None and coder.user == "coder" and not coder.provision
    assert coder.password in (out / CONF_FILE).read_text()
    again = runner.invoke(app, ["auth", "init", str(out), "--team", str(team)])
    assert again.exit_code == 2 and "--force" in again.output
    assert read_creds(creds_file(out, "coder")) == coder


def test_the_toml_files_of_earlier_versions_still_work(tmp_path: Path) -> None:
    old = tmp_path / "planner.creds"
    old.write_text('user = "planner"\npassword = "pw"\nprovision = false\n'
                   'check_streams = true\nsecret = "s3"\n')
    assert read_creds(old) == UserCreds("planner", "pw", False, True, "s3", "_INBOX_planner")


def test_the_include_line_is_relative_to_the_server_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nats-server reads an include relative to the including file's directory (and an
    absolute path as if it were relative), so the printed line is written for it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "team.toml").write_text(TEAM)
    runner = CliRunner()
    here = runner.invoke(app, ["auth", "init", "users", "--team", "team.toml"])
    assert here.exit_code == 0, here.output
    assert 'include "users/nats-auth.conf"' in here.output
    there = runner.invoke(app, ["auth", "init", "users", "--team", "team.toml", "--force",
                                "--server-config", "etc/nats/nats.conf"])
    assert there.exit_code == 0, there.output
    assert 'include "../../users/nats-auth.conf"  to etc/nats/nats.conf' in there.output
