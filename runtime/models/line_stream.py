"""The lines of one streamed completion, each handed out the moment its newline arrives.

The planner reads its plan through :class:`LineStream` (``ModelClient.stream_lines``):
JSON Lines, or with a ``steps``-framed constraint the elements of the answer's ``steps``
array, while the model is still writing the rest. It counts the call exactly once,
however the stream ends.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import TYPE_CHECKING, Self

import openai

from protocols import Usage

from .chat_stream import ChatChunkStream, ChunkUsage
from .failures import model_error
from .json_stream import StepArrayReader
from .retries import Calls
from .structured import Constraint

if TYPE_CHECKING:
    from ..config import ModelSettings

__all__ = ["LineStream", "split_lines"]


class LineStream:
    """The lines of one streamed completion (without their newlines), as they arrive.

    A final line without a newline is yielded at the end, unless the model was stopped
    there by ``max_tokens`` (``finish_reason`` "length": the line was cut). ``usage``,
    ``finish_reason`` and ``text`` are complete once the iteration has ended. A stream
    closed before its end
    (a plan rejected mid-stream, a timeout) still counts: its usage is estimated from the
    text received.
    """

    def __init__(self, open_stream: Callable[[Calls], Awaitable[ChatChunkStream]],
                 count: Callable[[ChunkUsage | None, str, Calls, bool], Usage],
                 settings: ModelSettings, constraint: Constraint | None = None) -> None:
        """``open_stream`` sends the request (counting each one sent); ``count`` turns what
        the server reported (or None), the text received, the requests sent and whether one
        was answered into the call's usage, once; ``settings`` name the model in errors."""
        self.usage: Usage | None = None
        """Usage of the call; None until the stream has ended."""
        self.finish_reason: str | None = None
        """Why the model stopped; None until it says."""
        self._parts: list[str] = []
        """The text received so far, in pieces (joined when read: no quadratic +=)."""
        self._open_stream = open_stream
        self._count = count
        self._settings = settings
        self._constraint = constraint
        self._steps = StepArrayReader() if constraint and constraint.framing == "steps" \
            else None
        self._stream: ChatChunkStream | None = None
        self._calls = Calls()
        self._reported: ChunkUsage | None = None
        self._ready: deque[str] = deque()
        self._partial: list[str] = []
        """Pieces of the line being written (most chunks end no line: one append each)."""
        self._done = False

    @property
    def text(self) -> str:
        """Everything received so far."""
        if len(self._parts) > 1:
            self._parts[:] = ["".join(self._parts)]
        return self._parts[0] if self._parts else ""

    @property
    def framing(self) -> str:
        """``lines`` (JSON Lines, or any text) or ``steps`` (elements of a steps array)."""
        return "steps" if self._steps is not None else "lines"

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> str:
        while not self._ready:
            if self._done:
                raise StopAsyncIteration
            await self._pull()
        return self._ready.popleft()

    async def _pull(self) -> None:
        if self._stream is None:
            self._stream = await self._open_stream(self._calls)
        try:
            chunk = await self._stream.next_chunk()
        except openai.OpenAIError as exc:
            await self.aclose()
            raise model_error(exc, self._settings, self._constraint) from exc
        if chunk is None:
            await self._finish()
            return
        if chunk.usage is not None:
            self._reported = chunk.usage
        if chunk.choices:
            choice = chunk.choices[0]
            self.finish_reason = choice.finish_reason or self.finish_reason
            if choice.delta is not None and choice.delta.content:
                self._feed(choice.delta.content)

    def _feed(self, content: str) -> None:
        self._parts.append(content)
        if self._steps is not None:
            self._ready.extend(self._steps.feed(content))
            return
        if "\n" not in content:
            self._partial.append(content)
            return
        complete, rest = split_lines("".join(self._partial), content)
        self._partial = [rest] if rest else []
        self._ready.extend(complete)

    async def _finish(self) -> None:
        self._done = True
        if self._steps is not None and not self._steps.started:
            # The server ignored the schema (some take response_format and do nothing):
            # read what the model wrote as lines, so the scheduler can say what is wrong.
            self._steps = None
            complete, rest = split_lines("", self.text)
            self._partial = [rest] if rest else []
            self._ready.extend(complete)
        if self._steps is not None:
            self._ready.extend(self._steps.finish())
        if self._partial and self.finish_reason != "length":
            self._ready.append("".join(self._partial))  # a last line without its newline
        self._partial = []  # cut by max_tokens: not a line, the caller sees finish_reason
        await self.aclose()

    async def aclose(self) -> None:
        """Stop streaming and release the connection (safe to call more than once); the
        call is counted here, once, whether it ended, was cut or got no answer."""
        self._done = True
        if self._calls.sent and self.usage is None:
            self.usage = self._count(self._reported, self.text, self._calls,
                                     self._stream is not None)
        if self._stream is not None:
            await self._stream.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def split_lines(partial: str, content: str) -> tuple[list[str], str]:
    """Complete the lines that ``content`` ends; returns them and the new partial line."""
    *complete, rest = (partial + content).split("\n")
    return [line.removesuffix("\r") for line in complete], rest
