"""An executor's claims and results, stored per run as one message when they come in the
same moment (``step.outcomes``): a hundred steps that started together end together, and
their planner then stores, acknowledges and handles one message instead of a hundred.

Each sender returns once its own message is stored, as if it had been sent alone; one
sent alone (the only one of its moment, or ``outcome_batch`` = 1) travels exactly as it
did before batches, under its own message id.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import anyio
import anyio.lowlevel

from protocols import StepClaimed, StepOutcomes, StepResult
from runtime.bus import Bus, Unsettled
from runtime.errors import PlancastError

Outcome = StepClaimed | StepResult


@dataclass
class _Item:
    message: Outcome
    msg_id: str
    stored: bool = False
    error: BaseException | None = None


@dataclass
class _Moment:
    """What was sent in one event-loop turn, by subject."""

    items: dict[str, list[_Item]] = field(default_factory=dict)
    done: anyio.Event = field(default_factory=anyio.Event)


class NotStored(PlancastError):
    """The sender of a moment's outcomes was stopped before they were known stored."""


class Outbox:
    """Sends outcomes to runs' result subjects, those of one moment to one run together."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self._moment: _Moment | None = None

    async def send(self, subject: str, message: Outcome, *, msg_id: str) -> None:
        """Store ``message`` on ``subject``; returns once it is stored (raises what storing
        it raised, e.g. ``StorageFull``, or ``NotStored``)."""
        item = _Item(message, msg_id)
        moment = self._moment
        if moment is not None:  # someone sends this moment's: wait for it
            moment.items.setdefault(subject, []).append(item)
            await moment.done.wait()
        else:
            moment = self._moment = _Moment({subject: [item]})
            try:
                with anyio.CancelScope(shield=True):  # the others of the moment wait on it
                    await anyio.lowlevel.checkpoint()  # the rest of this turn's join
                    self._moment = None
                    sent = await self._send_all(moment)
                await self._settle(sent)
            finally:
                if self._moment is moment:
                    self._moment = None
                moment.done.set()
        if not item.stored:
            raise item.error or NotStored(f"{msg_id}: its sender was stopped")

    async def _send_all(self, moment: _Moment) -> list[tuple[list[_Item], Unsettled]]:
        sent: list[tuple[list[_Item], Unsettled]] = []
        for subject, items in moment.items.items():
            for chunk in self._chunks(items):
                try:
                    sent.append((chunk, await self._send(subject, chunk)))
                except Exception as exc:
                    for item in chunk:
                        item.error = exc
        return sent

    async def _settle(self, sent: list[tuple[list[_Item], Unsettled]]) -> None:
        try:
            await self.bus.settle([u for _, u in sent])  # one wait for all
        except Exception:  # find out which failed: each one again on its own
            pass
        for chunk, unsettled in sent:
            try:
                await self.bus.settle([unsettled])  # at once if it is stored already
            except Exception as exc:
                for item in chunk:
                    item.error = exc
            else:
                for item in chunk:
                    item.stored = True

    async def _send(self, subject: str, chunk: list[_Item]) -> Unsettled:
        if len(chunk) == 1:
            return await self.bus.publish_soon(subject, chunk[0].message, msg_id=chunk[0].msg_id)
        first = chunk[0].message
        digest = hashlib.blake2b("\n".join(i.msg_id for i in chunk).encode(), digest_size=12)
        return await self.bus.publish_soon(
            subject, StepOutcomes(run_id=first.run_id, outcomes=[i.message for i in chunk]),
            msg_id=f"{first.run_id}/outcomes/{digest.hexdigest()}")

    def _chunks(self, items: list[_Item]) -> list[list[_Item]]:
        """At most ``outcome_batch`` per message, and about half the largest message at
        most (a large one goes alone, and may be offloaded)."""
        most, limit = self.bus.settings.outcome_batch, self.bus.settings.max_message_bytes // 2
        chunks: list[list[_Item]] = []
        size = 0
        for item in items:
            length = _size(item.message)
            if not chunks or len(chunks[-1]) >= most or size + length > limit:
                chunks.append([])
                size = 0
            chunks[-1].append(item)
            size += length
        return chunks


def _size(message: Outcome) -> int:
    """About its encoded size, without encoding it (its texts, and room for the rest)."""
    if isinstance(message, StepResult):
        return 512 + len(message.output or "") + len(message.error)
    return 256
