"""Fixtures for the headless Chromium tests of the bundled web client.

The browser is Debian's `chromium`, driven by Debian's `chromium-driver` through selenium,
with exactly the flags ARCHITECTURE.md lists (its fake microphone plays a WAV made with
espeak-ng). The server is a real `RTCServer` on 127.0.0.1 running in a background event loop
(an anyio blocking portal), so the tests themselves are plain synchronous selenium code.

Tests use `serve(script)` (the server; `serve_fake_speech` for one on fake speech engines),
`open_page(server.url, said)` (a `Page`: the web
client in a new browser, read through its `data-testid` elements and `window.llmrtc`).

Missing chromium, chromium-driver or selenium skip these tests with a loud reason (and a
banner at the end of the run); under `CI=true` they fail instead (tests/_requirements.py).
"""

from __future__ import annotations

import io
import json
import subprocess
import time
import wave
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests._requirements import require

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
PLAYBOOK = Path(__file__).resolve().parents[2] / "playbooks" / "weather.yaml"
VIEWPORT = (1200, 800)
LEAD_SILENCE = 1.0  # seconds before the speech: the fake mic starts before media flows
TRAIL_SILENCE = 2.0  # seconds after it: the server's endpointer must hear the utterance end


@pytest.fixture(scope="session")
def browser_available() -> None:
    """Skip (or fail under CI=true) without selenium, chromium, chromedriver, espeak-ng."""
    require("browser", "espeak")


def _espeak_pcm(text: str) -> tuple[bytes, int]:
    """Mono s16 PCM of `text` spoken by espeak-ng (en-us, 150 words a minute), and its rate."""
    result = subprocess.run(
        ["espeak-ng", "-v", "en-us", "-s", "150", "--stdout", text],
        capture_output=True,
        check=True,
        timeout=60,
    )
    # espeak-ng's stdout WAV has a bogus length header: read to the end of the data instead.
    with wave.open(io.BytesIO(result.stdout)) as wav:
        assert wav.getsampwidth() == 2 and wav.getnchannels() == 1, wav.getparams()
        return wav.readframes(wav.getnframes()), wav.getframerate()


@pytest.fixture
def fake_mic_wav(tmp_path: Path, browser_available: None) -> Callable[[str], Path]:
    """`fake_mic_wav(text)`: a WAV for Chromium's fake microphone, `text` spoken with
    LEAD_SILENCE before and TRAIL_SILENCE after; `fake_mic_wav("")` is silence only."""

    def make(text: str) -> Path:
        rate = 22050  # espeak-ng's own rate: Chromium resamples the file itself
        pcm = b""
        if text:
            pcm, rate = _espeak_pcm(text)
        lead = bytes(2 * round(LEAD_SILENCE * rate))
        trail = bytes(2 * round(TRAIL_SILENCE * rate))
        path = tmp_path / f"mic-{len(list(tmp_path.glob('mic-*.wav')))}.wav"
        with wave.open(str(path), "wb") as out:
            out.setnchannels(1)
            out.setsampwidth(2)
            out.setframerate(rate)
            out.writeframes(lead + pcm + trail)
        return path

    return make


def chromium_flags(user_data_dir: Path, wav: Path) -> list[str]:
    """Exactly the flags ARCHITECTURE.md measured for headless Chromium as a WebRTC client."""
    return [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={user_data_dir}",
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={wav}%noloop",
        "--allow-loopback-in-peer-connection",
        "--autoplay-policy=no-user-gesture-required",
    ]


@pytest.fixture
def chromium(tmp_path: Path, browser_available: None) -> Iterator[Callable[[Path], Any]]:
    """`chromium(wav)`: a headless Chromium (selenium WebDriver) whose microphone plays `wav`,
    its viewport VIEWPORT. Each is quit (selenium stops its own chromedriver and browser, by
    their process ids) when the test ends."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    drivers: list[Any] = []

    def launch(wav: Path) -> Any:
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        profile = tmp_path / f"profile-{len(drivers)}"
        profile.mkdir()
        for flag in chromium_flags(profile, wav):
            options.add_argument(flag)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
        drivers.append(driver)
        width, height = VIEWPORT
        driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        return driver

    yield launch
    for driver in drivers:
        driver.quit()


@pytest.fixture(scope="module")
def portal(browser_available: None) -> Iterator[Any]:
    """A background asyncio event loop (anyio blocking portal) for the server and speech."""
    from anyio.from_thread import start_blocking_portal

    with start_blocking_portal(backend="asyncio") as running:
        yield running


@pytest.fixture(scope="module")
def speech(portal: Any) -> Iterator[Any]:
    """The real offline speech stack (Silero, faster-whisper, piper), loaded once per module."""
    require("rtc")
    from llmrtc.voice import open_default_speech

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LLMRTC_SPEECH", "offline")  # the offline stack, even with OPENAI_* set
        require("voice_model")
        with portal.wrap_async_context_manager(open_default_speech()) as opened:
            yield opened


def _server_factory(portal: Any, speech: Any, stack: ExitStack) -> Callable[..., Any]:
    """`start(script, ...)`: an `RTCServer` on speech `speech` (see `serve`), stopped with
    `stack`."""
    from llmrtc.playbook import PlaybookOrchestrator, load_playbook, load_playbook_tools
    from llmrtc.rtc.config import ServerConfig
    from llmrtc.rtc.server import RTCServer
    from llmrtc.testing import ScriptedLLM

    def start(
        script: Sequence[Any] = (),
        *,
        llm: Any = None,
        max_sessions: int = 4,
        idle_timeout: float = 300.0,
        playbook_path: Path = PLAYBOOK,
        resume_wait: float = 3.0,
    ) -> Any:
        playbook = load_playbook(playbook_path)
        tools = load_playbook_tools(playbook)

        def agent() -> PlaybookOrchestrator:
            model = llm if llm is not None else ScriptedLLM(list(script))
            return PlaybookOrchestrator(playbook, model, tools)

        # A short grace: when the test ends its browser is gone and no session will end itself.
        config = ServerConfig(
            host="127.0.0.1",
            port=0,
            max_sessions=max_sessions,
            idle_timeout=idle_timeout,
            shutdown_grace=2.0,
            resume_wait=resume_wait,
        )
        server = RTCServer(agent, speech=speech, config=config)
        stack.enter_context(portal.wrap_async_context_manager(server))
        return server

    return start


@pytest.fixture
def serve(portal: Any, speech: Any) -> Iterator[Callable[..., Any]]:
    """`serve(script, max_sessions=4, idle_timeout=300.0, playbook_path=PLAYBOOK,
    resume_wait=3.0)`: a real
    `RTCServer` on
    127.0.0.1 (a free port) whose sessions each run the playbook (the weather one by default)
    with a new `ScriptedLLM(script)` (or all with the one model given as `llm=`, to follow a
    conversation across a resume). Stopped when the test ends."""
    with ExitStack() as stack:
        yield _server_factory(portal, speech, stack)


@pytest.fixture
def serve_fake_speech(portal: Any) -> Iterator[Callable[..., Any]]:
    """`serve` with the fake speech engines of `llmrtc.testing` instead of the offline models:
    for tests of the page's own behaviour with typed turns (no model to load). `FakeTTS` speaks
    each character in 20 ms, so an answer's voice plays for about as long as it is read."""
    require("rtc")
    from llmrtc.testing import FakeSTT, FakeTTS, FakeVAD
    from llmrtc.voice.speech import Speech

    tts = FakeTTS(seconds_per_char=0.02)
    speech = Speech(vad=FakeVAD(), stt=FakeSTT([], tts=tts), tts=tts)
    with ExitStack() as stack:
        yield _server_factory(portal, speech, stack)


@pytest.fixture
def open_page(
    chromium: Callable[[Path], Any], fake_mic_wav: Callable[[str], Path]
) -> Callable[..., Page]:
    """`open_page(url, said="", raw_mic=True)`: the web client at `url` in a new headless
    Chromium whose microphone says `said` (silence when empty). `raw_mic`: open it with the
    page's test-only `?test_raw_mic=1`, which turns the browser's echo cancellation, noise
    suppression and gain control off for the fake microphone (ARCHITECTURE.md); a real user's
    page keeps them on."""

    def open_(url: str, said: str = "", *, raw_mic: bool = True) -> Page:
        return Page(chromium(fake_mic_wav(said)), f"{url}?test_raw_mic=1" if raw_mic else url)

    return open_


class Page:
    """The web client in one browser tab: its testid elements and `window.llmrtc`."""

    def __init__(self, driver: Any, url: str) -> None:
        self.driver = driver
        self.url = url
        driver.get(url)
        self.handle = driver.current_window_handle

    def new_tab(self) -> Page:
        """The page again, in a new tab of the same browser (which then has the focus)."""
        self.driver.switch_to.new_window("tab")
        return Page(self.driver, self.url)

    def focus(self) -> None:
        """Make this tab the one the driver talks to."""
        self.driver.switch_to.window(self.handle)

    def element(self, testid: str) -> Any:
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.CSS_SELECTOR, f'[data-testid="{testid}"]')

    def text(self, testid: str) -> str:
        return str(self.element(testid).text)

    def state(self) -> dict[str, Any]:
        return dict(self.driver.execute_script("return window.llmrtc;"))

    def js(self, script: str, *args: Any) -> Any:
        return self.driver.execute_script(script, *args)

    def wait(self, what: str, check: Callable[[], Any], timeout: float = 60.0) -> Any:
        """Poll `check` until it returns something true; on timeout fail with the page's state."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                result = check()
            except Exception:  # an element mid-update (stale) or not there yet
                result = None
            if result:
                return result
            if time.monotonic() > deadline:
                pytest.fail(f"timed out after {timeout} s waiting for {what}\n{self.describe()}")
            time.sleep(0.2)

    def describe(self) -> str:
        texts = {
            testid: self.text(testid)
            for testid in ("status", "stage", "error", "transcript", "assistant", "tool-calls")
        }
        state = self.state()
        events = [
            {k: v for k, v in e.items() if k not in ("sdp", "resume_token")}
            for e in state.get("events", [])
        ]
        try:
            console = [entry["message"] for entry in self.driver.get_log("browser")]
        except Exception:
            console = []
        counters = {k: v for k, v in state.items() if k != "events" and not callable(v)}
        return (
            f"page: {json.dumps(texts, indent=1)}\ncounters: {json.dumps(counters, default=str)}"
            f"\nevents: {json.dumps(events)}\nconsole: {console}"
        )

    def connect(self) -> None:
        self.element("connect").click()
        self.wait(
            "the status to say Connected",
            lambda: self.element("status").get_attribute("data-state") == "connected",
            timeout=30,
        )

    def type_text(self, text: str) -> None:
        self.wait("the text box to be enabled", lambda: self.element("text-input").is_enabled())
        self.element("text-input").send_keys(text)
        self.element("send").click()

    def tool_items(self) -> list[dict[str, str]]:
        return list(
            self.js(
                """return [...document.querySelectorAll('[data-testid="tool-calls"] li')].map(
                     (li) => ({name: li.querySelector('.tool-name').textContent,
                               status: li.dataset.status,
                               duration: li.querySelector('.tool-duration').textContent}));"""
            )
        )
