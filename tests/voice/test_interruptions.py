"""Interruptions that behave like people, with the fake engines: speech over the agent pauses
it; a cough (no words) resumes the reply from the word where it stopped; a backchannel
("uh-huh") neither interrupts nor makes a turn; words make it a real barge-in (tools cancelled
by their policy, the history cut to what was heard); typed text interrupts as speech would."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import pytest

from llmrtc.agent.events import TextDelta, ToolCallFinished, ToolCallStarted
from llmrtc.agent.runner import TurnRunner
from llmrtc.execution.executor import ToolExecutor
from llmrtc.llm.messages import AssistantMessage, UserMessage
from llmrtc.telemetry.events import BargeInEvent
from llmrtc.testing import FakeSTT, FakeTTS, FakeVAD, RecordingHooks, ScriptedLLM
from llmrtc.testing.scripted import ScriptedResponse, check_chat_messages
from llmrtc.tools.calls import ToolCall
from llmrtc.tools.registry import ToolRegistry
from llmrtc.tools.tool import tool
from llmrtc.voice import VoiceConfig, VoiceLoop
from llmrtc.voice._turns import hearing
from llmrtc.voice.audio import split_frames
from llmrtc.voice.events import (
    AgentSpeechEnded,
    AgentSpeechStarted,
    BargeIn,
    Transcript,
    UserSpeechEnded,
)

pytestmark = pytest.mark.anyio

COUNT = "One two three four five six seven eight nine ten."  # 2.5 s of FakeTTS speech
STORY = "One two three four five. Six seven eight nine ten."  # two sentences of COUNT
BACKCHANNELS = VoiceConfig().backchannels


class SlowSTT(FakeSTT):
    """`FakeSTT(tts=...)` that takes `delay` seconds per utterance (a real STT's time)."""

    def __init__(self, tts: FakeTTS, delay: float) -> None:
        super().__init__(tts=tts)
        self.delay = delay

    async def transcribe(self, pcm: bytes) -> str:
        await anyio.sleep(self.delay)
        return await super().transcribe(pcm)


class Session:
    """A loop on a real `TurnRunner` whose every event and outbound frame is logged in order
    (`log`: events, and True/False for a speech/silent frame)."""

    def __init__(
        self,
        script: Sequence[Any],
        *,
        stt_delay: float = 0.0,
        tools: Sequence[Any] = (),
        **config: Any,
    ) -> None:
        self.tts = FakeTTS()
        self.stt = SlowSTT(self.tts, stt_delay)
        self.llm = ScriptedLLM(script)
        self.hooks = RecordingHooks()
        self.runner = TurnRunner(
            self.llm, ToolExecutor(ToolRegistry(list(tools))), system_prompt="Be brief."
        )
        self.loop = VoiceLoop(
            self.runner,
            stt=self.stt,
            tts=self.tts,
            vad=FakeVAD(),
            config=VoiceConfig(**config),
            hooks=self.hooks,
        )
        self.log: list[Any] = []

    async def watch(self, group: Any) -> None:
        events, frames = self.loop.events(), self.loop.audio_out()

        async def take_events() -> None:
            async for event in events:
                self.log.append(event)

        async def take_frames() -> None:
            async for frame in frames:
                self.log.append(bool(any(frame.pcm)))

        group.start_soon(take_events)
        group.start_soon(take_frames)
        await anyio.sleep(0)

    async def say(self, text: str, *, silence: float = 0.7) -> None:
        """Push `text` as FakeTTS speech, as fast as possible, then `silence` seconds."""
        pcm = self.tts.render(text) + bytes(2 * round(24000 * silence))
        for frame in split_frames(pcm, 24000):
            await self.loop.push_audio(frame)

    async def until(self, predicate: Any, timeout: float = 10) -> None:
        with anyio.fail_after(timeout):
            while not any(predicate(e) for e in self.log):
                await anyio.sleep(0.01)

    async def speaking(self, seconds: float = 0.5) -> None:
        """Wait until the reply has played `seconds`."""
        await self.until(lambda e: isinstance(e, AgentSpeechStarted))
        await anyio.sleep(seconds)

    def of(self, kind: type) -> list[Any]:
        return [e for e in self.log if isinstance(e, kind)]

    def kinds(self) -> list[str]:
        return [e.kind for e in self.of(BargeIn)]

    def user_lines(self) -> list[str]:
        return [m.content for m in self.loop.history.messages if isinstance(m, UserMessage)]


def speech_frames(log: list[Any]) -> int:
    return sum(1 for e in log if e is True)


def longest_silence_inside_speech(log: list[Any]) -> int:
    """The longest run of silent frames between the first and the last speech frame."""
    frames = [e for e in log if isinstance(e, bool)]
    first, last = frames.index(True), len(frames) - 1 - frames[::-1].index(True)
    longest = run = 0
    for voiced in frames[first : last + 1]:
        run = 0 if voiced else run + 1
        longest = max(longest, run)
    return longest


# A cough: no words ------------------------------------------------------------------------------


async def test_a_cough_pauses_the_reply_then_it_resumes_from_the_word_where_it_stopped() -> None:
    s = Session([COUNT], stt_delay=0.4)
    async with s.loop, anyio.create_task_group() as group:
        await s.watch(group)
        await s.loop.send_text("Count.")
        await s.speaking(0.6)
        await s.say("[cough]")  # 0.35 s of sound: a barge-in (0.2 s), transcribed as noise
        await s.until(lambda e: isinstance(e, AgentSpeechEnded))
        group.cancel_scope.cancel()
    assert s.kinds() == ["false"]
    assert s.of(AgentSpeechEnded) == [AgentSpeechEnded(False, COUNT)]
    assert s.loop.history.messages == (UserMessage("Count."), AssistantMessage(COUNT))
    assert len(s.llm.requests) == 1  # the cough made no turn
    assert [e.kind for e in s.hooks.of(BargeInEvent)] == ["false"]
    # The resume sends the reply's text nowhere again: its deltas went out once.
    assert "".join(e.text for e in s.of(TextDelta)) == COUNT
    # Paused while the cough was transcribed (word gaps are 2-3 frames), then the whole reply
    # played: the word the pause cut again, whole (at most the longest word, 0.3 s, twice).
    assert longest_silence_inside_speech(s.log) >= 10
    straight = sum(any(f.pcm) for f in split_frames(s.tts.render(COUNT), 24000))
    assert straight <= speech_frames(s.log) <= straight + 15 + 2


async def test_two_coughs_resume_twice() -> None:
    s = Session([COUNT], stt_delay=0.1)
    async with s.loop, anyio.create_task_group() as group:
        await s.watch(group)
        await s.loop.send_text("Count.")
        await s.speaking(0.4)
        await s.say("[cough]")
        await s.until(lambda e: isinstance(e, BargeIn))
        await anyio.sleep(0.3)
        await s.say("[cough]")
        await s.until(lambda e: isinstance(e, AgentSpeechEnded))
        group.cancel_scope.cancel()
    assert s.kinds() == ["false", "false"]
    assert s.of(AgentSpeechEnded) == [AgentSpeechEnded(False, COUNT)]
    assert s.loop.history.messages[-1] == AssistantMessage(COUNT)
    assert len(s.llm.requests) == 1


async def test_a_second_cough_during_the_pause_is_waited_for_and_resumes_once() -> None:
    s = Session([COUNT], stt_delay=0.4)
    async with s.loop, anyio.create_task_group() as group:
        await s.watch(group)
        await s.loop.send_text("Count.")
        await s.speaking(0.4)
        await s.say("[cough]")
        await s.say("[cough]")  # before the first one's transcript
        await s.until(lambda e: isinstance(e, AgentSpeechEnded))
        group.cancel_scope.cancel()
    assert s.kinds() == ["false"]
    assert s.of(AgentSpeechEnded) == [AgentSpeechEnded(False, COUNT)]
    assert len(s.stt.utterances) == 2 and len(s.llm.requests) == 1


async def test_a_transcript_slower_than_the_timeout_resumes_the_reply() -> None:
    s = Session([COUNT, "Yes?"], stt_delay=0.8, false_interruption_timeout=0.2)
    async with s.loop, anyio.create_task_group() as group:
        await s.watch(group)
        await s.loop.send_text("Count.")
        await s.speaking(0.5)
        await s.say("[cough]")
        await s.until(lambda e: isinstance(e, AgentSpeechEnded))
        group.cancel_scope.cancel()
    assert s.kinds() == ["false"]  # resumed at the timeout; the late noise changed nothing
    assert s.of(AgentSpeechEnded) == [AgentSpeechEnded(False, COUNT)]
    assert len(s.stt.utterances) == 1 and len(s.llm.requests) == 1


async def test_words_transcribed_after_the_timeout_still_cut_the_resumed_reply() -> None:
    s = Session([COUNT, "Yes?"], stt_delay=0.8, false_interruption_timeout=0.2)
    async with s.loop, anyio.create_task_group() as group:
        await s.watch(group)
        await s.loop.send_text("Count.")
        await s.speaking(0.5)
        await s.say("stop now")
        await s.until(lambda e: len(s.of(AgentSpeechEnded)) >= 2)
        group.cancel_scope.cancel()
    assert s.kinds() == ["false", "barge_in"]
    ended = s.of(AgentSpeechEnded)[0]
    assert ended.interrupted and COUNT.startswith(ended.heard_text) and ended.heard_text != COUNT
    assert s.llm.requests[1].messages[-2:] == [
        AssistantMessage(ended.heard_text, (), True),
        UserMessage("stop now"),
    ]


@pytest.mark.parametrize(("said", "a_turn"), [("hmm", False), ("okay", True)])
async def test_a_sound_over_the_end_of_a_reply_transcribed_after_it_ended(
    said: str, a_turn: bool
) -> None:
    # Too short to pause the reply (barge_in_min_speech 0.5 s), and transcribed once the reply
    # had ended: a filler is still no turn; "okay" now answers the agent.
    s = Session(["Shall I?", "Done."], stt_delay=1.0, barge_in_min_speech=0.5)
    async with s.loop, anyio.create_task_group() as group:
        await s.watch(group)
        await s.loop.send_text("Book it.")
        await s.speaking(0.1)
        await s.say(said)
        await s.until(lambda e: isinstance(e, AgentSpeechEnded))
        await anyio.sleep(1.3)
        if a_turn:
            await s.until(lambda e: len(s.of(AgentSpeechEnded)) >= 2)
        group.cancel_scope.cancel()
    assert s.kinds() == []
    assert s.user_lines() == (["Book it.", said] if a_turn else ["Book it."])


async def test_a_word_too_short_to_pause_the_agent_cuts_it_at_its_transcript() -> None:
    # "No" (0.25 s) is under barge_in_min_speech: no pause, but its words cut the reply (it
    # has more to say) once transcribed instead of waiting for the reply to end.
    s = Session([STORY, "Okay, I stop."], stt_delay=0.2, barge_in_min_speech=0.5)
    async with s.loop, anyio.create_task_group() as group:
        await s.watch(group)
        await s.loop.send_text("Count.")
        await s.speaking(0.5)
        await s.say("No")
        await s.until(lambda e: len(s.of(AgentSpeechEnded)) >= 2)
        group.cancel_scope.cancel()
    assert s.kinds() == ["barge_in"]
    ended = s.of(AgentSpeechEnded)[0]
    assert ended.interrupted and STORY.startswith(ended.heard_text) and ended.heard_text != STORY
    assert s.llm.requests[1].messages[-2:] == [
        AssistantMessage(ended.heard_text, (), True),
        UserMessage("No"),
    ]


async def test_a_short_word_does_not_hold_back_a_real_barge_in_after_it() -> None:
    # "you" is too short to pause the reply; "stop that please" right after it pauses it.
    # Neither waits for the reply to end: no pause times out into a resume ("false").
    s = Session([STORY, "Sure.", "Stopped."], stt_delay=0.3, barge_in_min_speech=0.3)
    async with s.loop, anyio.create_task_group() as group:
        await s.watch(group)
        await s.loop.send_text("Count.")
        await s.speaking(0.4)
        await s.say("you", silence=0.7)
        await s.say("stop that please")
        await s.until(lambda e: len(s.llm.requests) >= 3)
        await anyio.sleep(0.5)
        group.cancel_scope.cancel()
    assert "false" not in s.kinds() and s.kinds()[0] == "barge_in"
    first = s.of(AgentSpeechEnded)[0]
    assert first.interrupted and first.heard_text != STORY
    assert s.user_lines() == ["Count.", "you", "stop that please"]
    check_chat_messages(s.llm.requests[2].messages)


# Backchannels -----------------------------------------------------------------------------------


@pytest.mark.parametrize("said", ["uh-huh", "yeah", "okay", "right", "mm-hmm"])
async def test_a_backchannel_does_not_stop_the_reply_and_is_no_turn(said: str) -> None:
    s = Session([COUNT], stt_delay=0.1)
    async with s.loop, anyio.create_task_group() as group:
        await s.watch(group)
        await s.loop.send_text("Count.")
        await s.speaking(0.5)
        await s.say(said)
        await s.until(lambda e: isinstance(e, AgentSpeechEnded))
        group.cancel_scope.cancel()
    assert s.kinds() == ["backchannel"]
    assert [e.kind for e in s.hooks.of(BargeInEvent)] == ["backchannel"]
    assert s.of(AgentSpeechEnded) == [AgentSpeechEnded(False, COUNT)]
    assert s.user_lines() == ["Count."] and len(s.llm.requests) == 1


async def test_a_backchannel_too_short_to_pause_goes_unheard_by_the_model() -> None:
    s = Session([COUNT], barge_in_min_speech=0.5)
    async with s.loop, anyio.create_task_group() as group:
        await s.watch(group)
        await s.loop.send_text("Count.")
        await s.speaking(0.5)
        await s.say("yeah")  # 0.2 s: no pause at all
        await s.until(lambda e: isinstance(e, AgentSpeechEnded))
        group.cancel_scope.cancel()
    assert s.kinds() == ["backchannel"]
    assert longest_silence_inside_speech(s.log) <= 3  # never paused: only word gaps
    assert s.of(AgentSpeechEnded) == [AgentSpeechEnded(False, COUNT)]
    assert s.user_lines() == ["Count."]


async def test_a_backchannel_followed_by_words_within_the_window_is_a_real_barge_in() -> None:
    s = Session([COUNT, "Paris is sunny."], stt_delay=0.4)
    async with s.loop, anyio.create_task_group() as group:
        await s.watch(group)
        await s.loop.send_text("Count.")
        await s.speaking(0.5)
        await s.say("uh-huh")
        await s.say("what about Paris")  # before the backchannel's transcript
        await s.until(lambda e: len(s.of(AgentSpeechEnded)) >= 2)
        group.cancel_scope.cancel()
    assert s.kinds() == ["barge_in"]
    ended = s.of(AgentSpeechEnded)[0]
    assert ended.interrupted and ended.heard_text != COUNT
    messages = s.llm.requests[1].messages
    check_chat_messages(messages)
    assert messages[-2:] == [
        AssistantMessage(ended.heard_text, (), True),
        UserMessage("what about Paris"),  # the backchannel is not a turn
    ]


async def test_custom_backchannels_and_none() -> None:
    custom = Session([COUNT], stt_delay=0.1, backchannels=("go on",))
    off = Session([COUNT, "Yes?"], stt_delay=0.1, backchannels=())
    for s, said in ((custom, "go on"), (off, "uh-huh")):
        async with s.loop, anyio.create_task_group() as group:
            await s.watch(group)
            await s.loop.send_text("Count.")
            await s.speaking(0.5)
            await s.say(said)
            await s.until(lambda e: isinstance(e, AgentSpeechEnded))
            await anyio.sleep(0.2)
            group.cancel_scope.cancel()
    assert custom.kinds() == ["backchannel"] and custom.user_lines() == ["Count."]
    assert off.kinds() == ["barge_in"] and off.user_lines() == ["Count.", "uh-huh"]


QUESTION = "Shall I book the table for two at eight tonight?"  # one sentence: the last


@pytest.mark.parametrize("said", ["yeah", "okay"])
async def test_a_backchannel_word_that_pauses_the_closing_question_answers_it(said: str) -> None:
    # The agent has nothing more to say and asked: "yeah" over its closing question is the
    # user's answer, a turn (the question cut where the pause silenced it), not a backchannel.
    s = Session([QUESTION, "Booked."], stt_delay=0.1)
    async with s.loop, anyio.create_task_group() as group:
        await s.watch(group)
        await s.loop.send_text("A table, please.")
        await s.speaking(1.5)
        await s.say(said)
        await s.until(lambda e: len(s.of(AgentSpeechEnded)) >= 2)
        group.cancel_scope.cancel()
    assert s.kinds() == ["barge_in"]
    ended = s.of(AgentSpeechEnded)[0]
    assert ended.interrupted and QUESTION.startswith(ended.heard_text)
    assert s.user_lines() == ["A table, please.", said]
    assert s.llm.requests[1].messages[-2:] == [
        AssistantMessage(ended.heard_text, (), True),
        UserMessage(said),
    ]


@pytest.mark.parametrize("said", ["yeah", "okay"])
async def test_a_quick_answer_over_the_closing_question_is_answered_after_it(said: str) -> None:
    # Too short to pause the agent: it ends its last sentence, then answers the user.
    s = Session([QUESTION, "Booked."], stt_delay=0.1, barge_in_min_speech=0.5)
    async with s.loop, anyio.create_task_group() as group:
        await s.watch(group)
        await s.loop.send_text("A table, please.")
        await s.speaking(1.5)
        await s.say(said)
        await s.until(lambda e: len(s.of(AgentSpeechEnded)) >= 2)
        group.cancel_scope.cancel()
    assert s.kinds() == []
    assert s.of(AgentSpeechEnded) == [
        AgentSpeechEnded(False, QUESTION),
        AgentSpeechEnded(False, "Booked."),
    ]
    assert s.llm.requests[1].messages[-2:] == [AssistantMessage(QUESTION), UserMessage(said)]


async def test_more_speech_over_a_last_sentence_with_an_answer_waiting_cuts_it_at_once() -> None:
    # "yes" waits for the question to end; the user going on cuts it without a pause, so no
    # verdict waits behind the "yes" (the reply would otherwise stay paused until the timeout).
    s = Session([QUESTION, "Booked.", "Fine."], stt_delay=0.1, barge_in_min_speech=0.3)
    async with s.loop, anyio.create_task_group() as group:
        await s.watch(group)
        await s.loop.send_text("A table, please.")
        await s.speaking(1.0)
        await s.say("yes")
        await s.until(lambda e: isinstance(e, Transcript) and e.text == "yes")
        await anyio.sleep(0.05)
        await s.say("and a window seat please")
        await s.until(lambda e: len(s.llm.requests) >= 3)
        await anyio.sleep(0.3)
        group.cancel_scope.cancel()
    assert s.kinds()[0] == "barge_in" and "false" not in s.kinds()
    first = s.of(AgentSpeechEnded)[0]
    assert first.interrupted and first.heard_text != QUESTION
    assert s.user_lines() == ["A table, please.", "yes", "and a window seat please"]
    check_chat_messages(s.llm.requests[2].messages)


@pytest.mark.parametrize("said", ["yeah", "mm-hmm"])
async def test_a_backchannel_over_a_closing_statement_is_still_one(said: str) -> None:
    statement = "It is sunny in Rome today, twenty degrees and a light wind."
    s = Session([statement], stt_delay=0.1)
    async with s.loop, anyio.create_task_group() as group:
        await s.watch(group)
        await s.loop.send_text("Weather in Rome?")
        await s.speaking(1.0)
        await s.say(said)
        await s.until(lambda e: isinstance(e, AgentSpeechEnded))
        group.cancel_scope.cancel()
    assert s.kinds() == ["backchannel"]
    assert s.of(AgentSpeechEnded) == [AgentSpeechEnded(False, statement)]
    assert s.user_lines() == ["Weather in Rome?"]


async def test_a_backchannel_over_the_first_sentence_is_still_one() -> None:
    s = Session(["Sure. " + QUESTION], stt_delay=0.1)
    async with s.loop, anyio.create_task_group() as group:
        await s.watch(group)
        await s.loop.send_text("A table, please.")
        await s.speaking(0.1)
        await s.say("yeah")  # over "Sure.": the agent has more to say
        await s.until(lambda e: isinstance(e, AgentSpeechEnded))
        group.cancel_scope.cancel()
    assert s.kinds() == ["backchannel"]
    assert s.of(AgentSpeechEnded) == [AgentSpeechEnded(False, "Sure. " + QUESTION)]
    assert s.user_lines() == ["A table, please."]


# Real barge-ins ---------------------------------------------------------------------------------


async def test_words_stop_playout_within_a_frame_and_cancel_a_cancel_tool_after_the_pause() -> None:
    runs: list[str] = []

    @tool
    async def lookup(order: str) -> str:
        """Look an order up."""
        runs.append("lookup")
        await anyio.sleep(30)
        return "found"

    lead = "Let me look that order up for you right now, it takes a moment."
    calls = [ToolCall("c1", "lookup", {"order": "A1"})]
    s = Session(
        [ScriptedResponse(text=lead, tool_calls=calls), "Sure."], stt_delay=0.4, tools=[lookup]
    )
    async with s.loop, anyio.create_task_group() as group:
        await s.watch(group)
        await s.loop.send_text("Where is A1?")
        await s.until(lambda e: isinstance(e, ToolCallStarted))
        await s.speaking(0.6)
        assert runs == ["lookup"]  # the tool runs while the lead-in plays
        speech = s.tts.render("stop that")
        for frame in split_frames(speech, 24000):  # 0.45 s of words: the pause comes in it
            await s.loop.push_audio(frame)
        paused_at = len(s.log)
        await anyio.sleep(0.2)  # the user still speaks: nothing decided yet
        assert not s.of(ToolCallFinished) and not s.of(BargeIn)
        await s.say("", silence=0.7)  # the utterance ends; its words come 0.4 s later
        await s.until(lambda e: len(s.of(AgentSpeechEnded)) >= 2)
        group.cancel_scope.cancel()
    barge = next(i for i, e in enumerate(s.log) if isinstance(e, BargeIn))
    second = next(i for i, e in enumerate(s.log) if isinstance(e, AgentSpeechStarted) and i > barge)
    assert speech_frames(s.log[paused_at:second]) <= 1  # silent from the pause on
    assert s.kinds() == ["barge_in"]
    finished = next(e for e in s.log if isinstance(e, ToolCallFinished))
    assert finished.result.status == "aborted"
    assert s.log.index(finished) > barge  # cancelled by the verdict, not by the pause
    assert s.user_lines() == ["Where is A1?", "stop that"]
    check_chat_messages(s.llm.requests[1].messages)


async def test_without_a_timeout_a_barge_in_is_real_at_once() -> None:
    s = Session([COUNT, "Yes?"], false_interruption_timeout=None)
    async with s.loop, anyio.create_task_group() as group:
        await s.watch(group)
        await s.loop.send_text("Count.")
        await s.speaking(0.5)
        await s.say("[cough]", silence=0.0)  # the utterance has not ended
        assert s.kinds() == ["barge_in"] and not s.of(UserSpeechEnded)
        await s.say("", silence=0.7)
        await anyio.sleep(0.2)
        group.cancel_scope.cancel()
    assert s.of(AgentSpeechEnded)[0].interrupted
    assert s.user_lines() == ["Count."]  # the cough is still no turn


async def test_interrupt_during_a_pause_is_a_real_barge_in() -> None:
    s = Session([COUNT], stt_delay=2.0)
    async with s.loop, anyio.create_task_group() as group:
        await s.watch(group)
        await s.loop.send_text("Count.")
        await s.speaking(0.5)
        await s.say("[cough]")
        await s.loop.interrupt()
        await s.until(lambda e: isinstance(e, AgentSpeechEnded))
        group.cancel_scope.cancel()
    assert s.kinds() == ["barge_in"]
    assert s.of(AgentSpeechEnded)[0].interrupted


async def test_leaving_the_loop_during_a_pause_settles_the_turn() -> None:
    s = Session([COUNT], stt_delay=5.0)
    with anyio.fail_after(5):
        async with s.loop, anyio.create_task_group() as group:
            await s.watch(group)
            await s.loop.send_text("Count.")
            await s.speaking(0.5)
            await s.say("[cough]")
            group.cancel_scope.cancel()
    (answer,) = [m for m in s.loop.history.messages if isinstance(m, AssistantMessage)]
    assert answer.interrupted and COUNT.startswith(answer.content)


# Typed text -------------------------------------------------------------------------------------


async def test_typed_text_while_the_agent_speaks_interrupts_it() -> None:
    s = Session([COUNT, "Paris is sunny."])
    async with s.loop, anyio.create_task_group() as group:
        await s.watch(group)
        await s.loop.send_text("Count.")
        await s.speaking(0.6)
        await s.loop.send_text("What about Paris?")
        await s.until(lambda e: len(s.of(AgentSpeechEnded)) >= 2)
        group.cancel_scope.cancel()
    assert s.kinds() == ["barge_in"]
    barge = next(i for i, e in enumerate(s.log) if isinstance(e, BargeIn))
    answer = [i for i, e in enumerate(s.log) if isinstance(e, AgentSpeechStarted)][1]
    assert barge < answer  # at once: typed text has words, no transcript to wait for
    ended = s.of(AgentSpeechEnded)[0]
    assert ended.interrupted and ended.heard_text and ended.heard_text != COUNT
    assert s.llm.requests[1].messages[-2:] == [
        AssistantMessage(ended.heard_text, (), True),
        UserMessage("What about Paris?"),
    ]


async def test_typed_text_during_a_tool_call_cancels_it_and_is_answered() -> None:
    @tool
    async def lookup(city: str) -> str:
        """Look the weather up."""
        await anyio.sleep(30)
        return "sunny"

    calls = [ToolCall("c1", "lookup", {"city": "Rome"})]
    s = Session([ScriptedResponse(tool_calls=calls), "Paris it is."], tools=[lookup])
    async with s.loop, anyio.create_task_group() as group:
        await s.watch(group)
        await s.loop.send_text("Weather in Rome?")
        await s.until(lambda e: isinstance(e, ToolCallStarted))
        await anyio.sleep(0.1)
        await s.loop.send_text("No, Paris.")
        await s.until(lambda e: isinstance(e, AgentSpeechEnded))
        group.cancel_scope.cancel()
    assert s.kinds() == ["barge_in"]
    finished = next(e for e in s.log if isinstance(e, ToolCallFinished))
    assert finished.result.status == "aborted"
    messages = s.llm.requests[1].messages
    check_chat_messages(messages)
    assert messages[-1] == UserMessage("No, Paris.")


# The pieces -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "noise"),
        (" ... ", "noise"),
        ("Hmm.", "noise"),
        ("Um, uh.", "noise"),
        ("[coughs]", "noise"),
        ("(door closes)", "noise"),
        ("*sniff*", "noise"),
        ("Uh-huh.", "backchannel"),
        ("Uh huh", "backchannel"),
        ("Mm-hmm.", "backchannel"),
        ("Mhm.", "backchannel"),  # how Whisper often writes mm-hmm
        ("Mmhm", "backchannel"),
        ("OK.", "backchannel"),
        ("Yeah, yeah.", "backchannel"),
        ("Okay, right.", "backchannel"),
        ("Hmm, yeah.", "backchannel"),
        ("Yeah, what about Paris?", "words"),
        ("Uh-huh, go on", "words"),
        ("Stop.", "words"),
        ("you", "words"),
    ],
)
def test_hearing_judges_a_transcript(text: str, expected: str) -> None:
    assert hearing(text, BACKCHANNELS) == expected


def test_without_backchannels_they_are_words() -> None:
    assert hearing("Uh-huh.", ()) == "words"
    assert hearing("Mm-hmm.", ()) == "noise"  # filler sounds alone are still not words


@pytest.mark.parametrize("bad", [0, -1.0, float("inf"), float("nan"), True, "1.5"])
def test_false_interruption_timeout_must_be_positive_seconds_or_none(bad: Any) -> None:
    with pytest.raises(ValueError, match="false_interruption_timeout must be a finite number"):
        VoiceConfig(false_interruption_timeout=bad)


@pytest.mark.parametrize("bad", [["yeah"], ("yeah", ""), ("...",), ("ok", 3), "yeah"])
def test_backchannels_must_be_a_tuple_of_phrases(bad: Any) -> None:
    with pytest.raises(ValueError, match="backchannels must be a tuple of phrases"):
        VoiceConfig(backchannels=bad)


# A backchannel is judged by what the agent was doing when it was said, not when its
# transcript arrived (review findings: a slow transcript made each of these a turn or a cut).

_LONG_STATEMENT = "One two three four five. It is sunny."


async def test_a_slow_backchannel_over_a_statement_stays_one_after_the_reply_ended() -> None:
    s = Session([_LONG_STATEMENT, "Anything else?"], stt_delay=2.5, false_interruption_timeout=0.2)
    async with s.loop, anyio.create_task_group() as group:
        await s.watch(group)
        await s.loop.send_text("Count.")
        await s.speaking(0.3)
        await s.say("mm-hmm")
        await s.until(lambda e: isinstance(e, AgentSpeechEnded))
        await anyio.sleep(3.0)
        group.cancel_scope.cancel()
    assert s.user_lines() == ["Count."]


async def test_a_short_yeah_transcribed_after_the_reply_ended_is_no_turn() -> None:
    s = Session(["One two. Three.", "Anything else?"], stt_delay=1.5, barge_in_min_speech=0.5)
    async with s.loop, anyio.create_task_group() as group:
        await s.watch(group)
        await s.loop.send_text("Count.")
        await s.speaking(0.1)
        await s.say("yeah")
        await s.until(lambda e: isinstance(e, AgentSpeechEnded))
        await anyio.sleep(2.0)
        group.cancel_scope.cancel()
    assert s.user_lines() == ["Count."]


async def test_a_late_backchannel_said_over_the_first_sentence_never_cuts_the_question() -> None:
    s = Session(
        ["One two three. " + QUESTION, "Ok."], stt_delay=1.2, false_interruption_timeout=0.2
    )
    async with s.loop, anyio.create_task_group() as group:
        await s.watch(group)
        await s.loop.send_text("Count.")
        await s.speaking(0.2)
        await s.say("mm-hmm")
        await s.until(lambda e: isinstance(e, AgentSpeechEnded))
        await anyio.sleep(1.5)
        group.cancel_scope.cancel()
    assert s.of(AgentSpeechEnded)[0].interrupted is False


async def test_typed_text_during_a_backchannel_pause_leaves_the_backchannel_no_turn() -> None:
    s = Session(["One two three four five six seven eight.", "A", "B"], stt_delay=0.6)
    async with s.loop, anyio.create_task_group() as group:
        await s.watch(group)
        await s.loop.send_text("Count.")
        await s.speaking(0.3)
        await s.say("mm-hmm", silence=0.1)
        await s.loop.send_text("What about Paris?")
        await s.say("", silence=0.7)
        await anyio.sleep(3.0)
        group.cancel_scope.cancel()
    assert s.user_lines() == ["Count.", "What about Paris?"]


@pytest.mark.parametrize(
    ("last", "asks"),
    [
        ("Shall I book it?", True),
        ("你想知道明天的天气吗\uff1f", True),  # the full-width question mark
        ("Want the forecast too?!", True),
        ('Did you say "Oslo?"', True),
        ("It is sunny.", False),
    ],
)
def test_a_closing_question_is_read_in_every_way_it_is_written(last: str, asks: bool) -> None:
    from llmrtc.voice.reply import _QUESTION

    assert (_QUESTION.search(last) is not None) is asks
