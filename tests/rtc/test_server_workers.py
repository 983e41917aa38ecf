"""Several workers on one `SQLiteSessionStore` (`llmrtc serve --workers N`): a reconnect that
lands on a worker where the session is not live waits for the old worker's save before
`resume_refused` (rtc/_resume.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from tests._requirements import require

require("rtc")

from llmrtc.rtc import RTCError, RTCServer, SQLiteSessionStore
from llmrtc.rtc.store import SessionState
from llmrtc.testing import FakeTTS, RTCTestClient, ScriptedLLM

from .conftest import config, fake_speech, settled

pytestmark = pytest.mark.anyio


def runners(llm: ScriptedLLM) -> Any:
    from llmrtc import ToolExecutor, ToolRegistry
    from llmrtc.agent import TurnRunner

    return lambda: TurnRunner(llm, ToolExecutor(ToolRegistry()), system_prompt="Be brief.")


class WorkerStore:
    """One worker's view of the shared store: its saves may wait for `gate`, its claims are
    counted and set `claimed_once` (a real `SQLiteSessionStore` underneath)."""

    def __init__(self, shared: SQLiteSessionStore, gate: anyio.Event | None = None) -> None:
        self.shared = shared
        self.gate = gate
        self.claims = 0
        self.claimed_once = anyio.Event()

    async def save(self, state: SessionState, *, ttl: float) -> None:
        if self.gate is not None:
            await self.gate.wait()  # the old worker is slow to save
        await self.shared.save(state, ttl=ttl)

    async def load(self, session_id: str) -> SessionState | None:
        return await self.shared.load(session_id)

    async def claim(self, session_id: str, token: str) -> SessionState | None:
        self.claims += 1
        try:
            return await self.shared.claim(session_id, token)
        finally:
            self.claimed_once.set()

    async def delete(self, session_id: str) -> None:
        await self.shared.delete(session_id)


async def test_a_resume_on_another_worker_waits_for_the_old_workers_save(tmp_path: Path) -> None:
    shared = SQLiteSessionStore(tmp_path / "sessions.sqlite3")
    gate = anyio.Event()
    store_a, store_b = WorkerStore(shared, gate), WorkerStore(shared)
    llm = ScriptedLLM(["First answer.", "Second answer."])
    try:
        async with (
            RTCServer(runners(llm), speech=fake_speech(), config=config(), store=store_a) as a,
            RTCServer(runners(llm), speech=fake_speech(), config=config(), store=store_b) as b,
        ):
            async with RTCTestClient(a.url, tts=FakeTTS()) as client:
                await client.send_text("Hello")
                await client.wait_for("turn_completed")
                credentials = (client.session_id, client.resume_token)
                await client.drop()

            async def save_after_the_first_claim() -> None:
                await store_b.claimed_once.wait()  # B has looked and found nothing
                gate.set()

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(save_after_the_first_claim)
                async with RTCTestClient(b.url, resume=credentials, tts=FakeTTS()) as again:  # type: ignore[arg-type]
                    assert again.resumed and again.session_id == credentials[0]
                    await again.send_text("And again?")
                    assert (await again.wait_for("turn_completed"))["text"] == "Second answer."
            assert store_b.claims >= 2  # refused at first, claimed once A had saved
            assert a.active_sessions == 0
    finally:
        gate.set()  # a failed test must not leave A's session waiting to save
        shared.close()
    assert len(llm.requests[-1].messages) == 4  # system, first turn (user, answer), the new one


async def test_a_wrong_token_on_another_worker_is_refused_after_the_wait(tmp_path: Path) -> None:
    shared = SQLiteSessionStore(tmp_path / "sessions.sqlite3")
    store_a, store_b = WorkerStore(shared), WorkerStore(shared)
    llm = ScriptedLLM(["First answer.", "Second answer."])
    try:
        async with (
            RTCServer(runners(llm), speech=fake_speech(), config=config(), store=store_a) as a,
            RTCServer(runners(llm), speech=fake_speech(), config=config(), store=store_b) as b,
        ):
            async with RTCTestClient(a.url, tts=FakeTTS()) as client:
                await client.send_text("Hello")
                await client.wait_for("turn_completed")
                credentials = (client.session_id, client.resume_token)
                await client.drop()
            await settled(a)
            with pytest.raises(RTCError) as refused:
                async with RTCTestClient(b.url, resume=(credentials[0], "wrong"), tts=FakeTTS()):
                    pass
            assert refused.value.code == "resume_refused"
            assert store_b.claims >= 2  # it waited (polled) before refusing
            # The wrong token spoiled nothing: the right one still resumes, on either worker.
            async with RTCTestClient(b.url, resume=credentials, tts=FakeTTS()) as again:  # type: ignore[arg-type]
                assert again.resumed
    finally:
        shared.close()


async def test_a_refusal_takes_the_same_wait_whether_the_session_is_live_or_unknown(
    tmp_path: Path,
) -> None:
    shared = SQLiteSessionStore(tmp_path / "sessions.sqlite3")
    store = WorkerStore(shared)
    wait = 1.0
    try:
        async with (
            RTCServer(
                runners(ScriptedLLM([])),
                speech=fake_speech(),
                config=config(resume_wait=wait),
                store=store,
            ) as server,
            RTCTestClient(server.url, tts=FakeTTS()) as client,
        ):
            assert client.session_id is not None
            for session_id in (client.session_id, "nobody-has-this-id"):
                store.claims = 0
                started = anyio.current_time()
                with pytest.raises(RTCError) as refused:
                    async with RTCTestClient(
                        server.url, resume=(session_id, "wrong"), tts=FakeTTS()
                    ):
                        pass
                assert refused.value.code == "resume_refused"
                # a live id is not told apart by an early refusal: both wait it out
                assert anyio.current_time() - started >= wait
                assert store.claims >= 2
            await client.ping()  # the live session is untouched
    finally:
        shared.close()


class BlockedClaims(WorkerStore):
    """Claims find nothing while `blocked` (the old worker has not saved yet)."""

    def __init__(self, shared: SQLiteSessionStore) -> None:
        super().__init__(shared)
        self.blocked = False

    async def claim(self, session_id: str, token: str) -> SessionState | None:
        if self.blocked:
            self.claims += 1
            return None
        return await super().claim(session_id, token)


@pytest.mark.requires("browser")
def test_the_web_page_retries_a_refused_automatic_resume(tmp_path: Path) -> None:
    import time
    import wave

    from anyio.from_thread import start_blocking_portal
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    wav = tmp_path / "silence.wav"
    with wave.open(str(wav), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(48000)
        out.writeframes(bytes(2 * 48000))
    shared = SQLiteSessionStore(tmp_path / "sessions.sqlite3")
    store = BlockedClaims(shared)
    llm = ScriptedLLM(["First answer.", "Second answer."])
    server = RTCServer(runners(llm), speech=fake_speech(), config=config(), store=store)
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={wav}",
        "--allow-loopback-in-peer-connection",
    ):
        options.add_argument(flag)

    def wait(driver: Any, what: str, script: str, timeout: float = 60.0) -> Any:
        deadline = time.monotonic() + timeout
        while not (result := driver.execute_script(script)):
            if time.monotonic() > deadline:
                state = driver.execute_script("return JSON.stringify(window.llmrtc);")
                pytest.fail(f"timed out waiting for {what}: {state}")
            time.sleep(0.2)
        return result

    try:
        with (
            start_blocking_portal(backend="asyncio") as portal,
            portal.wrap_async_context_manager(server),
        ):
            driver = webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))
            try:
                driver.get(server.url)
                driver.find_element("css selector", "[data-testid=connect]").click()
                wait(driver, "connected", "return window.llmrtc.state === 'connected';")
                session_id = driver.execute_script("return window.llmrtc.sessionId;")
                store.blocked = True  # the next resumes are refused, as on a worker too early
                assert driver.execute_script("return window.llmrtc.simulateDrop();") is True
                wait(driver, "a second resume", "return window.llmrtc.resumes >= 2;")
                store.blocked = False  # "saved" now: the retry finds it
                wait(driver, "the resume", "return window.llmrtc.state === 'connected';")
                state = driver.execute_script("return window.llmrtc;")
                assert state["resumed"] is True and state["sessionId"] == session_id
                refused = [e for e in state["events"] if e.get("code") == "resume_refused"]
                assert refused  # it was refused at first, and the page kept the session
            finally:
                driver.quit()
    finally:
        shared.close()
