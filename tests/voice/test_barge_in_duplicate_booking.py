"""Issue 21's proof on the voice loop: after a barge-in, the model asks for the same booking
again (same arguments, other key order and whitespace in its JSON); a tool with
`on_duplicate="reuse"` books once and answers the repeat with the first call's result. A
booking that failed is not reused: the repeat runs the handler again."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from llmrtc.agent.events import ToolCallFinished, ToolCallStarted
from llmrtc.agent.runner import TurnRunner
from llmrtc.execution.executor import ToolExecutor
from llmrtc.llm.messages import ToolMessage
from llmrtc.testing import FakeSTT, FakeTTS, FakeVAD, ScriptedLLM
from llmrtc.testing.scripted import ScriptedResponse, check_chat_messages
from llmrtc.tools.calls import ToolCall, ToolCallResult
from llmrtc.tools.errors import ToolError
from llmrtc.tools.registry import ToolRegistry
from llmrtc.tools.tool import tool
from llmrtc.voice import VoiceLoop
from llmrtc.voice.audio import split_frames
from llmrtc.voice.events import AgentSpeechEnded, BargeIn

pytestmark = pytest.mark.anyio

FIRST = '{"party": 2, "time": "19:00"}'
REPEAT = '{ "time" : "19:00",\n  "party":2 }'  # the same booking, as a model may re-emit it


class Booking:
    """A voice loop whose model books a table, is interrupted while the booking runs, and asks
    for the same booking again on the next turn."""

    def __init__(self, *, first_fails: bool = False) -> None:
        self.runs: list[dict[str, Any]] = []
        self.release = anyio.Event()
        runs, release = self.runs, self.release

        @tool(on_duplicate="reuse", on_interrupt="finish", side_effects=("books a table",))
        async def book_table(party: int, time: str) -> dict[str, Any]:
            """Book a table for `party` people at `time`."""
            runs.append({"party": party, "time": time})
            if len(runs) == 1:
                await release.wait()  # runs until the user has barged in
                if first_fails:
                    raise ToolError("the restaurant's system did not answer")
            return {"booking": f"B{len(runs)}", "party": party, "time": time}

        self.llm = ScriptedLLM(
            [
                ScriptedResponse(
                    text="Booking it.", tool_calls=[ToolCall("c1", "book_table", FIRST)]
                ),
                ScriptedResponse(
                    text="Let me check.", tool_calls=[ToolCall("c2", "book_table", REPEAT)]
                ),
                "Your table for two at seven is booked.",
            ]
        )
        runner = TurnRunner(
            self.llm,
            ToolExecutor(ToolRegistry([book_table])),
            system_prompt="Be brief.",
            session_id="caller-1",
        )
        self.tts = FakeTTS()
        self.loop = VoiceLoop(runner, stt=FakeSTT(tts=self.tts), tts=self.tts, vad=FakeVAD())
        self.seen: list[Any] = []

    async def until(self, events: Any, predicate: Any, timeout: float = 10) -> None:
        with anyio.fail_after(timeout):
            async for event in events:
                self.seen.append(event)
                if predicate(event):
                    return
        raise AssertionError(f"events ended: {self.seen}")

    async def say(self, text: str) -> None:
        pcm = self.tts.render(text) + bytes(2 * 24000 * 7 // 10)  # then 0.7 s of silence
        for frame in split_frames(pcm, 24000):
            await self.loop.push_audio(frame)

    async def run(self) -> dict[str, ToolCallResult]:
        """Book, barge in while the booking runs, let it end, and wait for the answer of the
        turn that repeated it. The results by call id."""
        async with self.loop:
            events = self.loop.events()
            await self.loop.send_text("Book a table for two at seven.")
            await self.until(events, lambda e: isinstance(e, ToolCallStarted))
            with anyio.fail_after(5):
                while not self.runs:
                    await anyio.sleep(0.01)
            await self.say("Wait, did that go through?")
            await self.until(events, lambda e: isinstance(e, BargeIn))
            self.release.set()  # the "finish" booking ends after the barge-in
            await self.until(
                events, lambda e: isinstance(e, AgentSpeechEnded) and not e.interrupted
            )
        finished = [e.result for e in self.seen if isinstance(e, ToolCallFinished)]
        assert [r.call_id for r in finished] == ["c1", "c2"]  # one result per call
        return {r.call_id: r for r in finished}

    def tool_messages(self) -> list[ToolMessage]:
        check_chat_messages(self.llm.requests[-1].messages)  # a history a chat API accepts
        return [m for m in self.loop.history.messages if isinstance(m, ToolMessage)]


async def test_a_booking_repeated_after_a_barge_in_is_reused_not_made_twice() -> None:
    booking = Booking()
    results = await booking.run()
    assert booking.runs == [{"party": 2, "time": "19:00"}]  # the handler ran once
    first, repeat = results["c1"], results["c2"]
    assert first.status == "ok" and first.reused_from is None
    assert first.result == {"booking": "B1", "party": 2, "time": "19:00"}
    assert repeat.status == "ok"
    assert repeat.reused_from == "c1"
    assert repeat.result == first.result
    assert repeat.to_content() == first.to_content()
    # every call has exactly one result in the history, the repeat with the first's content
    tool_messages = booking.tool_messages()
    assert [m.call_id for m in tool_messages] == ["c1", "c2"]
    assert tool_messages[0].content == tool_messages[1].content == first.to_content()
    # the model heard the reused result before its final answer
    assert ToolMessage("c2", first.to_content()) in booking.llm.requests[2].messages
    assert booking.tts.spoken[-1] == "Your table for two at seven is booked."


async def test_a_booking_that_failed_is_not_reused_the_repeat_books_again() -> None:
    booking = Booking(first_fails=True)
    results = await booking.run()
    assert booking.runs == [{"party": 2, "time": "19:00"}] * 2  # ran again
    first, repeat = results["c1"], results["c2"]
    assert first.status == "error"
    assert first.error == "the restaurant's system did not answer"
    assert repeat.status == "ok" and repeat.reused_from is None
    assert repeat.result == {"booking": "B2", "party": 2, "time": "19:00"}
    tool_messages = booking.tool_messages()
    assert [m.call_id for m in tool_messages] == ["c1", "c2"]
    assert tool_messages[1].content == repeat.to_content()
