"""``http_get``: fetch a web page for a model, bounded in bytes and in wall time.

The body is streamed and reading stops at ``max_bytes``, so a huge or endless response
costs no more than the limit; only http and https URLs are fetched.
"""

from __future__ import annotations

import codecs
from typing import Annotated

import anyio
import httpx2
import msgspec

from runtime.errors import ToolError

from ._base import StructTool

ALLOWED_SCHEMES = frozenset({"http", "https"})


class HttpGetArgs(msgspec.Struct, forbid_unknown_fields=True):
    url: Annotated[str, msgspec.Meta(description="An http:// or https:// URL to GET.")]


class HttpGetTool(StructTool[HttpGetArgs]):
    """GETs a URL and returns the status line and the body as text (4xx/5xx included)."""

    name = "http_get"
    args_type = HttpGetArgs

    def __init__(
        self, *, timeout: float = 15.0, max_bytes: int = 200_000, max_redirects: int = 5
    ) -> None:
        self.timeout = timeout
        """Seconds for the whole request, connect to last byte read."""
        self.max_bytes = max_bytes
        """Body bytes kept; the rest is not read."""
        self.max_redirects = max_redirects
        self.description = (
            "Fetch a URL with HTTP GET and return the status and the body as text "
            f"(the first {max_bytes} bytes). Only http and https URLs."
        )

    async def call(self, args: HttpGetArgs) -> str:
        url = _checked_url(args.url)
        with anyio.move_on_after(self.timeout) as scope:
            return await self._fetch(url)
        assert scope.cancelled_caught
        raise ToolError(f"GET {args.url} timed out after {self.timeout:g} s")

    async def _fetch(self, url: httpx2.URL) -> str:
        try:
            async with (
                httpx2.AsyncClient(
                    timeout=self.timeout,
                    follow_redirects=True,
                    max_redirects=self.max_redirects,
                    trust_env=False,
                    headers={"Accept-Encoding": "identity"},
                ) as client,
                client.stream("GET", url) as response,
            ):
                body, truncated = await self._read_body(response)
                status = f"HTTP {response.status_code} {response.reason_phrase}".rstrip()
                encoding = _encoding(response.charset_encoding)
        except httpx2.TimeoutException:
            raise ToolError(f"GET {url} timed out after {self.timeout:g} s") from None
        except httpx2.HTTPError as exc:
            raise ToolError(f"GET {url} failed: {type(exc).__name__}: {exc}") from None
        text = body.decode(encoding, errors="replace")
        note = f"\n[truncated: only the first {self.max_bytes} bytes shown]" if truncated else ""
        return f"{status}\n\n{text}{note}"

    async def _read_body(self, response: httpx2.Response) -> tuple[bytes, bool]:
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > self.max_bytes:
                return bytes(body[: self.max_bytes]), True
        return bytes(body), False


def _checked_url(url: str) -> httpx2.URL:
    try:
        parsed = httpx2.URL(url)
    except httpx2.InvalidURL as exc:
        raise ToolError(f"not a valid URL: {url!r} ({exc})") from None
    if parsed.scheme not in ALLOWED_SCHEMES:
        raise ToolError(f"only http:// and https:// URLs can be fetched, not {url!r}")
    if not parsed.host:
        raise ToolError(f"URL has no host: {url!r}")
    return parsed


def _encoding(charset: str | None) -> str:
    """The response's declared charset if Python knows it, else UTF-8."""
    if charset:
        try:
            return codecs.lookup(charset).name
        except LookupError:
            pass
    return "utf-8"
