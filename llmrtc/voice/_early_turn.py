"""`EarlyTurn`: preemptive generation in a voice loop — a pause transcribed and answered
before the loop has decided that the user finished.

At each pause that may last (`UtterancePaused`: `min_end_silence`, and with a turn detector
its verdict "unfinished") while the agent is idle, the loop
transcribes the utterance so far and, if it holds words, has the handler start the turn's first
model request on it (`PreemptingHandler.preempt`). If the user speaks again
(`UtteranceResumed`) or anything else comes first (typed text, a barge-in, the loop closing),
it is dropped: the request is aborted and nothing was played or run. If the utterance ends
with no speech after the pause, its transcript is this one (the same audio, no second STT
pass), and the turn takes the answer already under way (`run_turn(..., preemption=...)`),
which it uses only if its first request is exactly the one started.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio

from llmrtc.agent.preemption import Preemption

logger = logging.getLogger(__name__)


class EarlyTurn:
    """One pause's transcript and early answer (see the module docstring)."""

    def __init__(self, turn_id: str, duration: float) -> None:
        self.turn_id = turn_id
        """The utterance it belongs to."""
        self.duration = duration
        """`UtterancePaused.duration`: the utterance's end must have the same (no speech since)."""
        self.text: str | None = None
        """The transcript, once heard ("" for no words)."""
        self.error: Exception | None = None
        """Why the transcription failed, if it did: the utterance's failure (the same audio)."""
        self.stt_seconds = 0.0
        """How long the transcription took."""
        self.preemption: Preemption | None = None
        """The handler's early answer, once started (None: no words, or none to start)."""
        self._heard = anyio.Event()
        self._scope: anyio.CancelScope | None = None
        self._dropped = False

    async def run(
        self,
        recognize: Callable[[], Awaitable[str]],
        preempt: Callable[[str], Preemption | None],
        has_words: Callable[[str], bool],
        still_idle: Callable[[], bool],
    ) -> None:
        """Transcribe (`recognize`), then start and run the early answer (`preempt`) if the
        transcript `has_words` and the agent is `still_idle` (nothing began meanwhile that
        changes the history). Runs until the answer ends or `drop()`."""
        with anyio.CancelScope() as self._scope:
            if self._dropped:
                return
            started = anyio.current_time()
            try:
                self.text = (await recognize()).strip()
            except Exception as exc:  # the utterance's STT failure, reported when it ends
                self.error = exc
                return
            finally:
                self.stt_seconds = anyio.current_time() - started
                self._heard.set()
            if self._dropped or not has_words(self.text) or not still_idle():
                return
            try:
                early = preempt(self.text)
            except Exception:  # a handler bug costs the head start, never the turn
                logger.exception("turn %s: preempt() failed; no early answer", self.turn_id)
                return
            if early is None:
                return
            self.preemption = early
            await early.run()

    async def transcript(self) -> str | None:
        """The transcript, once heard; None when it was dropped before it was heard.

        Raises:
            Exception: what the STT raised (the utterance's own failure: the same audio).
        """
        await self._heard.wait()
        if self.error is not None:
            raise self.error
        return self.text

    def drop(self, reason: str) -> None:
        """The utterance went on, or something else came first: stop, discard the answer."""
        self._dropped = True
        if self.preemption is not None:
            self.preemption.discard(reason)
        if self._scope is not None:
            self._scope.cancel()
        self._heard.set()  # unheard, `transcript()` is None
