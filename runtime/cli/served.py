"""Which team a command serves: the one it is given, or it says why not.

A command that serves a team (``up``, ``worker``, ``run``) and would join the local
deployment (``plancast up`` on this machine) runs that deployment's team, not its own. So
the deployment records which team file it serves and a digest of the team as loaded (see
``runtime.bus`` ``announce``), and a command given another team, or the same file changed
since, refuses in one line naming both. Given none (no ``--team``, no ``./plancast.toml``),
``run`` uses whatever the local deployment serves, and says which.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from ..bus import serving
from ..config import Settings, TeamConfig
from .errors import TeamMismatch

DEFAULT_TEAM = Path("plancast.toml")


@dataclass(frozen=True)
class ServedTeam:
    """A team file as a deployment serves it: where it is and what it held then."""

    file: str
    digest: str

    @classmethod
    def of(cls, path: Path, team: TeamConfig) -> ServedTeam:
        """The record of ``team``, loaded from ``path``: the digest is of the team as
        loaded, so a comment or a blank line changes nothing, a role or a model does."""
        digest = hashlib.sha256(team.model_dump_json().encode()).hexdigest()
        return cls(str(path.resolve()), digest)

    def encode(self) -> str:
        return json.dumps({"team": self.file, "digest": self.digest})

    @classmethod
    def decode(cls, text: str | None) -> ServedTeam | None:
        """The record a deployment wrote; None if it wrote none (or one we cannot read)."""
        try:
            found = json.loads(text or "")
            return cls(str(found["team"]), str(found["digest"]))
        except (ValueError, TypeError, KeyError):
            return None


def given_team(team: Path | None) -> Path | None:
    """The team file a command was given: ``--team`` / ``PLANCAST_ROLES_FILE``, else
    ``./plancast.toml`` if there is one (None: no team given)."""
    if team is not None:
        return team
    return DEFAULT_TEAM if DEFAULT_TEAM.exists() else None


def served_by_local(settings: Settings) -> ServedTeam | None:
    """The team the local deployment records it serves (None if it records none)."""
    return ServedTeam.decode(serving(settings.data_dir / "nats"))


def check_same_team(settings: Settings, command: str, path: Path, team: TeamConfig) -> None:
    """Refuse, naming both, a team other than the one the local deployment at
    ``settings.nats_url`` serves (``command`` would join it, and run that one)."""
    given, served = ServedTeam.of(path, team), served_by_local(settings)
    if served is not None and served.digest == given.digest:
        return
    implicit = path == DEFAULT_TEAM
    named = "./plancast.toml" if implicit else f"--team {path}"
    where = f"the local deployment at {settings.nats_url}"
    start = "plancast up" if implicit else f"plancast up --team {path}"
    use_it = ""
    if command == "run":
        use_it = (", or run from a directory without plancast.toml to use its team"
                  if implicit else ", or leave out --team to use its team")
    apart = f", or keep it and run {path} apart with PLANCAST_DATA_DIR=<another dir>"
    if served is None:
        why = f"{where} does not say which team it serves (an older plancast started it)"
        fix = f"restart it with `{start}`"
    elif served.file == given.file:
        why = f"{path} has changed since {where} started serving it"
        fix = "restart `plancast up` to serve the change"
    else:
        why = f"{where} serves {served.file}, not {named}"
        fix = f"stop it and start `{start}`"
    raise TeamMismatch(f"plancast {command}: {why}: {fix}{use_it}{apart}")
