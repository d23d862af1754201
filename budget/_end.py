"""What both ends of an event channel share: close semantics as context managers, statistics."""

from __future__ import annotations

from types import TracebackType
from typing import Self

import trio

from ._state import ChannelState, ChannelStatistics


class ChannelEnd:
    """A channel end: ``close()`` is the subclass's; this adds ``aclose``, ``statistics`` and
    closing on exit from ``with`` and ``async with`` blocks, as trio's memory channels do."""

    __slots__ = ()
    _state: ChannelState

    def close(self) -> None:
        raise NotImplementedError

    async def aclose(self) -> None:
        """``close()``, then a checkpoint."""
        self.close()
        await trio.lowlevel.checkpoint()

    def statistics(self) -> ChannelStatistics:
        return self._state.statistics()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
