"""``plancast serve``: an HTTP/SSE gateway and a dashboard for clients without NATS, and who
may use it (the only package that imports starlette and uvicorn)."""

from .access import TOKEN_FILE as TOKEN_FILE
from .access import Access as Access
from .access import gateway_token as gateway_token
from .access import gateway_user as gateway_user
from .access import read_users as read_users
from .app import DECISION_WAIT as DECISION_WAIT
from .app import gateway as gateway
from .app import serve_http as serve_http
from .app import serving as serving
from .errors import GatewayAccessError as GatewayAccessError
from .errors import GatewayListenError as GatewayListenError

__all__ = (
    "DECISION_WAIT",
    "TOKEN_FILE",
    "Access",
    "GatewayAccessError",
    "GatewayListenError",
    "gateway",
    "gateway_token",
    "gateway_user",
    "read_users",
    "serve_http",
    "serving",
)
