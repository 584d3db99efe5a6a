"""Per-role NATS users for a chaos deployment, as ``plancast auth init`` writes them.

Every process connects as its own user (each runner as its role, the driver's client as
``client``, its observer as ``watcher``, provisioning as ``admin``); each node includes
the users' ``authorization`` block, and its route port takes only the other nodes,
which present a route secret (with client users on, an open route port would let any
local process join as a "server" and publish past every permission).
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from runtime.bus import CONF_FILE, creds_file, write_auth
from runtime.config import TeamConfig

ROUTE_USER = "route"


@dataclass(frozen=True)
class Users:
    directory: Path
    """Holds ``nats-auth.conf`` and one ``<user>.json`` per user."""
    route_password: str

    def creds(self, user: str) -> Path:
        return creds_file(self.directory, user)

    def include(self, config_dir: Path) -> str:
        """The ``include`` line for a server configuration in ``config_dir`` (nats-server
        resolves an include relative to the including file and takes no absolute path)."""
        return f"include {json.dumps(os.path.relpath(self.directory / CONF_FILE, config_dir))}"

    def route_authorization(self) -> str:
        """The ``authorization`` block of a node's ``cluster`` section."""
        return (f"authorization {{ user: {json.dumps(ROUTE_USER)}, "
                f"password: {json.dumps(self.route_password)} }}")

    def route_url(self, host: str, port: int) -> str:
        """A route to a node, presenting the route secret (URL-safe: no escaping needed)."""
        return f"nats-route://{ROUTE_USER}:{self.route_password}@{host}:{port}"


def make_users(directory: Path, prefix: str, team: TeamConfig) -> Users:
    """Write the users' files for ``team`` and choose a route secret."""
    write_auth(directory, prefix, team)
    return Users(directory, secrets.token_urlsafe(24))
