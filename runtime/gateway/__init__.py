"""``plancast serve``: an HTTP/SSE gateway and a dashboard for clients without NATS, and who
may use it (the only package that imports starlette and uvicorn)."""

from .access import TOKEN_FILE as TOKEN_FILE
from .access import Access as Access
from .access import gateway_token as gateway_token
from .app import gateway as gateway
from .app import serve_http as serve_http
from .errors import GatewayAccessError as GatewayAccessError

__all__ = (
    "TOKEN_FILE",
    "Access",
    "GatewayAccessError",
    "gateway",
    "gateway_token",
    "serve_http",
)
