"""The tool relay a resume in this process takes over (background calls still report to the
relay their batch captured) survives a chain of resumes: an older wait's TTL never drops the
entry a newer wait left."""

from __future__ import annotations

import anyio
import pytest

from llmrtc.rtc._tool_events import ToolEventRelay
from llmrtc.rtc.server import RTCServer

from .conftest import config, fake_speech

pytestmark = pytest.mark.anyio


class Handler:
    async def aclose(self) -> None:
        pass


async def test_an_older_waits_ttl_leaves_the_newer_waits_relay() -> None:
    async with RTCServer(
        lambda: Handler(), speech=fake_speech(), config=config(resume_ttl=0.6)
    ) as server:
        relay = ToolEventRelay(lambda message: None)
        # A vanishes: its handler waits with the relay.
        assert server._wait_for_resume(Handler(), "s1", relay)
        await anyio.sleep(0.2)
        # B resumes (takes the relay) and vanishes in turn, within A's TTL.
        taken, _ = server._relays.pop("s1")
        assert taken is relay
        assert server._wait_for_resume(Handler(), "s1", taken)
        await anyio.sleep(0.55)  # A's TTL has passed; B's has not
        assert server._relays["s1"][0] is relay  # C would take it over
        await anyio.sleep(0.4)  # B's TTL passes too: nothing is kept
        assert "s1" not in server._relays
