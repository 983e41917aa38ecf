"""The playout clock: pacing, silence, frame size, and what was heard of a cut segment."""

from __future__ import annotations

import logging

import anyio
import pytest

from llmrtc.voice.frames import AudioFrame
from llmrtc.voice.playout import Playout, SpokenReply

pytestmark = pytest.mark.anyio


def started_log() -> tuple[list[str], Playout]:
    log: list[str] = []

    def on_started(reply: SpokenReply, text: str) -> None:
        log.append(text)

    return log, Playout(16000, on_started=on_started)


async def test_frames_come_every_20_ms_against_a_fixed_start() -> None:
    _, playout = started_log()
    frames = playout.frames()
    times: list[float] = []
    got: list[AudioFrame] = []
    async with anyio.create_task_group() as group:
        group.start_soon(playout.run)
        async for frame in frames:
            times.append(anyio.current_time())
            got.append(frame)
            if len(got) == 50:
                break
        group.cancel_scope.cancel()
    assert all(f.sample_rate == 16000 and f.samples == 320 and f.channels == 1 for f in got)
    assert all(not any(f.pcm) for f in got)  # silence while quiet
    # 49 intervals of 20 ms: no drift beyond scheduling noise (generous bound)
    assert times[-1] - times[0] == pytest.approx(49 * 0.02, abs=0.15)


async def test_speech_plays_gaplessly_then_silence_and_the_reply_is_played() -> None:
    log, playout = started_log()
    frames = playout.frames()
    reply = playout.open_reply()
    first = reply.add_segment("Hello there.")
    second = reply.add_segment("Bye.")
    first.append(b"\x01\x00" * 480)  # 30 ms
    first.finish()
    second.append(b"\x02\x00" * 330)  # 20.6 ms
    second.finish()
    reply.close()
    async with anyio.create_task_group() as group:
        group.start_soon(playout.run)
        with anyio.fail_after(5):
            await reply.played()
        pcm = b""
        async for frame in frames:
            pcm += frame.pcm
            if len(pcm) >= 2 * 320 * 4:
                break
        group.cancel_scope.cancel()
    assert pcm.startswith(b"\x01\x00" * 480 + b"\x02\x00" * 330)  # no gap between segments
    assert not any(pcm[2 * 810 :])
    assert log == ["Hello there."]
    assert first.finished and second.finished
    assert reply.heard_text() == "Hello there. Bye."


async def test_a_cut_segment_counts_the_words_whose_end_was_played() -> None:
    _, playout = started_log()
    reply = playout.open_reply()
    # 10 characters over 1000 samples: "aaaa" ends at sample 400, "bbbbb" at 1000
    segment = reply.add_segment("aaaa bbbbb")
    segment.append(b"\x01\x00" * 1000)
    segment.finish()
    for played, heard in ((399, ""), (400, "aaaa"), (999, "aaaa")):
        segment._offset = 2 * played
        assert reply.heard_text() == heard
    playout.clear()
    assert playout.idle and segment.cleared
    with anyio.fail_after(1):
        await reply.played()  # a cleared reply counts as played
    assert reply.heard_text() == "aaaa"
    later = reply.add_segment("more")
    assert later.cleared  # nothing is queued after a barge-in


def test_a_slow_subscriber_is_noted_at_debug_level_at_most_once_in_a_while(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # publish runs inside the 20 ms audio clock: it must not log per dropped frame
    from llmrtc.voice._broadcast import Broadcast

    broadcast: Broadcast[int] = Broadcast(10, "audio_out()")
    lagging = broadcast.subscribe()
    with caplog.at_level(logging.DEBUG, logger="llmrtc.voice._broadcast"):
        for item in range(500):
            broadcast.publish(item)
    assert lagging.dropped == 490
    assert [r.levelno for r in caplog.records] == [logging.DEBUG]


async def test_speech_frames_silenced_by_clear_do_not_count_as_heard() -> None:
    _, playout = started_log()
    frames = playout.frames()
    reply = playout.open_reply()
    segment = reply.add_segment("aa bb cc dd ee ff gg hh ii jj")  # 29 chars over 1 s of audio
    segment.append(b"\x01\x00" * 16000)
    segment.finish()
    async with anyio.create_task_group() as group:
        group.start_soon(playout.run)
        taken = 0
        with anyio.fail_after(5):
            async for frame in frames:
                taken += any(frame.pcm)
                if taken == 10:  # 0.2 s taken: "aa bb" (5.8 chars) heard
                    break
        await anyio.sleep(0.2)  # ~10 more frames go out but stay in the consumer's buffer
        assert segment.played >= 15 * 320
        playout.clear()
        group.cancel_scope.cancel()
    assert reply.heard_text() == "aa bb"
    assert all(not any(frame.pcm) for frame in frames._buffer)


async def test_a_pause_at_a_segment_boundary_resumes_from_the_word_it_cut() -> None:
    # The consumer stops taking frames mid-"bb": the rest of the first segment and the start
    # of the second go out into its buffer, then the pause silences them. The first segment's
    # last word was never heard: it is said again, whole, before the second segment.
    _, playout = started_log()
    frames = playout.frames()
    reply = playout.open_reply()
    first = reply.add_segment("aa bb")  # 5 frames; "aa" ends at sample 640 of 1600
    first.append(b"".join(i.to_bytes(2, "little") for i in range(1600)))
    first.finish()
    second = reply.add_segment("cc dd")
    second.append(b"\x00\x7f" * 1600)
    second.finish()
    reply.close()
    async with anyio.create_task_group() as group:
        group.start_soon(playout.run)
        taken = 0
        with anyio.fail_after(5):
            async for frame in frames:
                taken += any(frame.pcm)
                if taken == 3:  # 960 samples taken: "aa" heard, "bb" cut
                    break
            while not second.played:
                await anyio.sleep(0.002)
        assert first.finished  # its end went out, into the consumer's buffer
        playout.pause()
        assert not first.finished and reply.heard_text() == "aa"
        assert all(not any(frame.pcm) for frame in frames._buffer)
        while frames._buffer:
            await frames.__anext__()
        playout.resume()
        pcm = b""
        with anyio.fail_after(5):
            async for frame in frames:
                pcm += frame.pcm
                if first.finished and second.finished:
                    break
            await reply.played()
        group.cancel_scope.cancel()
    pcm = pcm[pcm.index(b"\x80\x02") :]  # from the first sample resumed: 640 (0x0280)
    assert pcm.startswith(b"".join(i.to_bytes(2, "little") for i in range(640, 1600)))
    assert pcm[2 * 960 :].startswith(b"\x00\x7f" * 1600)  # then the whole second segment
    assert reply.heard_text() == "aa bb cc dd"


async def test_a_clear_at_a_segment_boundary_counts_only_what_was_played() -> None:
    _, playout = started_log()
    frames = playout.frames()
    reply = playout.open_reply()
    first = reply.add_segment("aa bb")
    first.append(b"\x01\x00" * 1600)
    first.finish()
    second = reply.add_segment("cc dd")
    second.append(b"\x02\x00" * 1600)
    second.finish()
    async with anyio.create_task_group() as group:
        group.start_soon(playout.run)
        taken = 0
        with anyio.fail_after(5):
            async for frame in frames:
                taken += any(frame.pcm)
                if taken == 3:
                    break
            while not second.played:
                await anyio.sleep(0.002)
        playout.clear()
        group.cancel_scope.cancel()
    assert first.cleared and second.cleared and playout.idle
    assert reply.heard_text() == "aa"  # "bb" went out only into the consumer's buffer
