"""The test client's signalling up to the answer: the server's first messages on the
WebSocket, read until its `answer` (applied, with any candidates trickled before it) or its
refusal (raised as `RTCError`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiortc import RTCPeerConnection
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from llmrtc.rtc.errors import RTCError
from llmrtc.rtc.peer import accept_answer, add_candidate, description_from_dict
from llmrtc.testing._rtc_events import close_code

__all__ = ["await_answer"]


async def await_answer(
    ws: ClientConnection,
    pc: RTCPeerConnection,
    record: Callable[[str | bytes], dict[str, Any]],
) -> None:
    """Read the server's messages (each passed to `record`, which parses and keeps it) until
    its `answer`, and apply the answer to `pc`, then the candidates that came before it.

    Raises:
        RTCError: the server's `error` (`server_full`, `resume_refused`, `bad_offer`, ...),
            or `connection_failed` when it closed the WebSocket without answering.
        ProtocolError: a malformed message (from `record`).
        ValueError: an answer or a candidate aiortc cannot use.
    """
    early_candidates: list[Any] = []
    while True:
        try:
            raw = await ws.recv()
        except ConnectionClosed as exc:
            raise RTCError(
                "connection_failed",
                f"the server closed the WebSocket before answering ({close_code(exc)})",
            ) from exc
        event = record(raw)
        kind = event["type"]
        if kind == "error":
            raise RTCError(event["code"], event["message"])
        if kind == "ice":  # remote candidates need the remote description first
            early_candidates.append(event["candidate"])
        elif kind == "answer":
            await accept_answer(pc, description_from_dict(event, expect="answer"))
            break
    for candidate in early_candidates:
        await add_candidate(pc, candidate)
