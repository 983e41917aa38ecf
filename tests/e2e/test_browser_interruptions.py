"""The page after an interruption shows each reply's text once (issue 19 §5: a reply cut
before its first word was heard read "SureSure": the page drew the turn's text again).

Real headless Chromium against a real `RTCServer` running the weather playbook with a
`ScriptedLLM`; speech is the fake engines of `llmrtc.testing` (the turns are typed).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from llmrtc.testing import ScriptedResponse

pytestmark = pytest.mark.requires("browser")

# FakeTTS speaks 20 ms a character: the first word plays for ~1.2 s, so Interrupt clicked once
# the voice starts cuts the reply before a word of it was heard. The model is still streaming
# (a delta every 0.3 s): its turn completes after the barge-in, as a slow real model's does.
FIRST_WORD = "W" + "e" * 58 + "ll."
ANSWER = FIRST_WORD + " Let me think about the weather for a moment, then I will tell you."


def reply_parts(page: Any) -> list[dict[str, Any]]:
    return list(
        page.js(
            """return [...document.querySelectorAll('[data-testid="assistant"] li.reply')].map(
                 (li) => ({heard: li.querySelector('.text').textContent,
                           unheard: li.querySelector('.unheard')?.textContent ?? null,
                           interrupted: li.classList.contains('interrupted')}));"""
        )
    )


def test_a_reply_cut_before_its_first_word_shows_its_text_once(
    serve_fake_speech: Callable[..., Any],
    open_page: Callable[..., Any],
) -> None:
    server = serve_fake_speech([ScriptedResponse(text=ANSWER, chunk_delay=0.3), "Sure."])
    page = open_page(server.url)
    page.connect()
    page.type_text("What is the weather?")
    page.wait(
        "the agent's voice to start",
        lambda: page.state()["eventsByType"].get("agent_speech_started"),
    )
    page.element("interrupt").click()
    page.wait("the turn to complete", lambda: page.state()["eventsByType"].get("turn_completed"))
    (interruption,) = [e for e in page.state()["events"] if e["type"] == "interruption"]
    assert interruption["kind"] == "barge_in" and interruption["heard_text"] == ""
    (completed,) = [e for e in page.state()["events"] if e["type"] == "turn_completed"]
    assert completed["text"].startswith(FIRST_WORD)  # the wire sends the text in it once more
    (reply,) = reply_parts(page)
    assert reply["interrupted"]
    # Nothing heard, all of what streamed dimmed as unheard, and none of it twice.
    assert reply["heard"] == ""
    assert reply["unheard"] == completed["text"]
