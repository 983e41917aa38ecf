"""What `llmrtc serve` opens once per process: the model (`--llm`), the speech engines, the
fakes of `--fake-engines`, and the OpenTelemetry hooks of `--otel`."""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractContextManager, asynccontextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from llmrtc.errors import LLMRTCError

if TYPE_CHECKING:
    from llmrtc.llm import LLMProvider
    from llmrtc.telemetry.hooks import Hooks
    from llmrtc.voice.speech import Speech

__all__ = [
    "FALLBACK_REPLY",
    "check_setup",
    "open_llm",
    "open_speech",
    "opening_message",
    "speech_mode_for",
    "telemetry",
    "workers_message",
]

LLMMode = Literal["auto", "offline", "openai"]
Progress = Callable[[str, float | None], None]

FALLBACK_REPLY = "I heard you."
"""What the `--fake-engines` model says once its script is used up."""
_FALLBACK_TURNS = 10_000  # a test server never gets near it


# Measured with `llmrtc serve playbooks/weather.yaml --llm offline` from start to the URL line
# on the project's 2-core machines, never idle (other helpers' test runs beside it), a few
# times each since 2a70e72 (the GGUF header read in 0.1 s): 7.0-11.5 s on later starts (the
# 1.5B's load 3.6-5.2 s, warm-up 1.1-3.9 s, speech 1-2 s); 21.5 s with an empty cache
# (LLMRTC_CACHE_DIR), of which 7.6 s join the 1.1 GB model from its packages. `--workers 2`
# load two models at once on two cores: 17.9-44 s (every stage about twice as long, more when
# the machine is busy), so each further worker adds about one more start.
_FIRST_START_SECONDS = 22
_LATER_START_SECONDS = 10


def _offline(mode: LLMMode, *, fake: bool) -> bool:
    api = bool(os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"))
    return not fake and (mode == "offline" or (mode == "auto" and not api))


def _joined_model() -> tuple[Path, bool]:
    """Where the offline model is joined, and whether it is there already."""
    from llmrtc.llm.local.weights import LOCAL_MODELS
    from llmrtc.packaged_models import cache_dir_for

    spec = LOCAL_MODELS.get(os.environ.get("LLMRTC_MODEL") or "1.5b", LOCAL_MODELS["1.5b"])
    joined = cache_dir_for(None) / spec.filename
    return joined, joined.is_file() and joined.stat().st_size == spec.size_bytes


def opening_message(mode: LLMMode, *, fake: bool, estimate: bool = True) -> str:
    """The line `llmrtc serve` prints before opening its engines: what it opens and, for the
    offline model, about how long that takes (much longer the first time: the model is joined
    from its packages into the cache directory then). `estimate=False` in a worker of
    `--workers`: the supervisor said how long the workers take together (`workers_message`)."""
    if fake:
        return "llmrtc serve: opening the fake engines..."
    opening = "llmrtc serve: opening the model and the speech engines"
    if not estimate or not _offline(mode, fake=fake):
        return f"{opening}..."
    joined, ready = _joined_model()
    if ready:
        return f"{opening} (about {_LATER_START_SECONDS} s)..."
    return (
        f"{opening}: the first start takes about {_FIRST_START_SECONDS} s (joining the model "
        f"from its packages into {joined.parent}), later ones about {_LATER_START_SECONDS} s..."
    )


def workers_message(mode: LLMMode, *, fake: bool, workers: int, port: int) -> str:
    """The supervisor's first line: N workers on the port and, for the offline model, about
    how long they take to start - N models loading at once share the machine's cores."""
    starting = f"llmrtc serve: starting {workers} workers on port {port}"
    if not _offline(mode, fake=fake):
        return starting
    later = _LATER_START_SECONDS * workers
    joined, ready = _joined_model()
    if ready:
        return (
            f"{starting}; each loads its own model, {workers} at once: about {later} s "
            "(longer on a busy machine)..."
        )
    first = _FIRST_START_SECONDS + _LATER_START_SECONDS * (workers - 1)
    return (
        f"{starting}; each loads its own model, {workers} at once: the first start takes about "
        f"{first} s (joining the model from its packages into {joined.parent}), later ones "
        f"about {later} s..."
    )


def check_setup(mode: LLMMode) -> None:
    """What the supervisor of `--workers` checks before starting any worker, so a setup every
    worker would fail the same way is said once.

    Raises:
        ServeSetupError: `openai` without OPENAI_API_KEY / OPENAI_BASE_URL.
    """
    if mode == "openai" and not (
        os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL")
    ):
        raise ServeSetupError(
            "--llm openai needs OPENAI_API_KEY (or OPENAI_BASE_URL for an OpenAI-compatible "
            "server); use --llm offline for the offline model"
        )


class ServeSetupError(LLMRTCError):
    """Something `llmrtc serve` needs cannot be opened; the message says what to do."""


def speech_mode_for(llm: LLMMode) -> AbstractContextManager[None]:
    """Speech follows `--llm offline|openai` unless `LLMRTC_SPEECH` already chooses."""
    if llm == "auto" or os.environ.get("LLMRTC_SPEECH"):
        return nullcontext()
    return _environment("LLMRTC_SPEECH", llm)


class _environment(AbstractContextManager[None]):
    def __init__(self, name: str, value: str) -> None:
        self.name, self.value = name, value

    def __enter__(self) -> None:
        os.environ[self.name] = self.value

    def __exit__(self, *exc: object) -> None:
        os.environ.pop(self.name, None)


@asynccontextmanager
async def open_llm(
    mode: LLMMode, *, fake_script: str | None, progress: Progress
) -> AsyncIterator[LLMProvider]:
    """The model for `--llm mode` (`fake_script` not None: the `--fake-engines` model, unless
    the mode is `openai`).

    Raises:
        ServeSetupError: `openai` without OPENAI_API_KEY / OPENAI_BASE_URL, a bad script.
    """
    from llmrtc.llm import OpenAIProvider
    from llmrtc.llm.default import DEFAULT_OPENAI_MODEL, local_provider, open_default_provider

    if mode == "openai":
        check_setup(mode)
        api_key = os.environ.get("OPENAI_API_KEY")
        base_url = os.environ.get("OPENAI_BASE_URL")
        model = os.environ.get("LLMRTC_MODEL") or DEFAULT_OPENAI_MODEL
        yield OpenAIProvider(model, base_url=base_url, api_key=api_key)
        return
    if fake_script is not None:
        yield _scripted(fake_script)
        return
    if mode == "auto":
        async with open_default_provider(progress=progress) as llm:
            yield llm
        return
    from llmrtc.llm.local import LOCAL_MODELS, LocalModelServer

    chosen = os.environ.get("LLMRTC_MODEL")
    async with LocalModelServer(
        chosen if chosen in LOCAL_MODELS else "1.5b", progress=progress
    ) as server:
        yield local_provider(server)


def _scripted(path: str) -> LLMProvider:
    """The `--fake-engines` model: SCRIPT.json's entries, then `FALLBACK_REPLY` forever."""
    from llmrtc.testing import ScriptedLLM
    from llmrtc.tools import ToolCall

    entries: list[Any] = []
    if path:
        try:
            raw = json.loads(Path(path).read_text(encoding="utf-8"))
            if not isinstance(raw, list):
                raise ValueError("the script must be a JSON list")
            for entry in raw:
                if isinstance(entry, str):
                    entries.append(entry)
                else:
                    entries.append(
                        [ToolCall(c["call_id"], c["name"], c.get("arguments", {})) for c in entry]
                    )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ServeSetupError(f"--fake-engines script {path}: {exc}") from exc
    return ScriptedLLM([*entries, *[FALLBACK_REPLY] * _FALLBACK_TURNS])


@asynccontextmanager
async def open_speech(*, fake: bool, progress: Progress) -> AsyncIterator[Speech]:
    """The speech engines: the offline or OpenAI ones (`open_default_speech`), or the fakes.
    `progress`: `ModelProgress.speech` (the stages shown as the speech engines')."""
    from llmrtc.voice.speech import Speech, open_default_speech

    if fake:
        from llmrtc.testing import FakeSTT, FakeTTS, FakeVAD

        tts = FakeTTS()
        yield Speech(vad=FakeVAD(), stt=FakeSTT(tts=tts), tts=tts)
        return
    async with open_default_speech(progress=progress) as speech:
        yield speech


class Telemetry:
    """The `--otel` hooks and the providers to flush and shut down at exit."""

    def __init__(self, hooks: Hooks | None, providers: tuple[Any, ...] = ()) -> None:
        self.hooks = hooks
        self._providers = providers

    def shutdown(self) -> None:
        """Flush what is buffered and stop the exporters."""
        for provider in self._providers:
            provider.shutdown()


def telemetry(kind: str | None) -> Telemetry:
    """OpenTelemetryHooks with a console exporter (on stderr: stdout carries the URL line) or
    an OTLP one (`OTEL_EXPORTER_OTLP_*` settings; `OTEL_EXPORTER_OTLP_PROTOCOL=grpc` for gRPC,
    else HTTP/protobuf). Providers are this process's own; no global one is installed.

    Raises:
        ServeSetupError: the OTLP exporter package is not installed.
    """
    if kind is None:
        return Telemetry(None)
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from llmrtc.telemetry.otel import OpenTelemetryHooks

    span_exporter: Any
    metric_exporter: Any
    if kind == "console":
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        span_exporter = ConsoleSpanExporter(out=sys.stderr)
        metric_exporter = ConsoleMetricExporter(out=sys.stderr)
    else:
        span_exporter, metric_exporter = _otlp_exporters()
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "llmrtc")})
    tracer_provider = TracerProvider(resource=resource)
    # Batched: exporting (a write, a network call) stays off the event loop's audio path.
    tracer_provider.add_span_processor(BatchSpanProcessor(span_exporter))
    reader = PeriodicExportingMetricReader(metric_exporter, export_interval_millis=60_000)
    meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
    hooks = OpenTelemetryHooks(tracer_provider=tracer_provider, meter_provider=meter_provider)
    return Telemetry(hooks, (tracer_provider, meter_provider))


def _otlp_exporters() -> tuple[Any, Any]:
    # By module name: the exporter packages are optional (the `otlp` extra), not even for mypy.
    grpc = os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "").strip().lower() == "grpc"
    base = "opentelemetry.exporter.otlp.proto." + ("grpc" if grpc else "http")
    try:
        spans = importlib.import_module(f"{base}.trace_exporter")
        metrics = importlib.import_module(f"{base}.metric_exporter")
    except ImportError as exc:
        raise ServeSetupError(
            f"--otel otlp needs the OTLP exporter ({exc.name} is missing): "
            'pip install "llmrtc[otlp]"'
        ) from exc
    return spans.OTLPSpanExporter(), metrics.OTLPMetricExporter()
