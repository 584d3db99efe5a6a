"""``plancast auth init`` writes private files, and never silently replaces passwords."""

from __future__ import annotations

import stat
from pathlib import Path

from typer.testing import CliRunner

from runtime.bus import CONF_FILE, read_creds
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
    users = {p.stem for p in out.glob("*.creds")}
    assert users == {"admin", "planner", "coder", "synthesizer", "client", "watcher"}
    for path in out.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    coder = read_creds(out / "coder.creds")
    assert coder is not None and coder.user == "coder" and not coder.provision
    assert coder.password in (out / CONF_FILE).read_text()
    again = runner.invoke(app, ["auth", "init", str(out), "--team", str(team)])
    assert again.exit_code == 2 and "--force" in again.output
    assert read_creds(out / "coder.creds") == coder
