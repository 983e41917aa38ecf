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

if TYPE_CHECKING:
    from llmrtc.llm import LLMProvider
    from llmrtc.telemetry.hooks import Hooks
    from llmrtc.voice.speech import Speech

__all__ = [
    "FALLBACK_REPLY",
    "open_llm",
    "open_speech",
    "opening_message",
    "speech_mode_for",
    "telemetry",
]

LLMMode = Literal["auto", "offline", "openai"]
Progress = Callable[[str, float | None], None]

FALLBACK_REPLY = "I heard you."
"""What the `--fake-engines` model says once its script is used up."""
_FALLBACK_TURNS = 10_000  # a test server never gets near it


# Measured on the project's 2-core machines with `llmrtc serve playbooks/weather.yaml` (one
# process, offline model and speech, another test run beside it): 34 s from start to the URL
# line with an empty cache (8 s joining the 1.1 GB model from its packages, then loading a
# file the page cache has not seen), 20 s on later starts (most of it "loading model").
_FIRST_START_SECONDS = 35
_LATER_START_SECONDS = 20


def opening_message(mode: LLMMode, *, fake: bool) -> str:
    """The line `llmrtc serve` prints before opening its engines: what it opens and, for the
    offline model, about how long that takes (much longer the first time: the model is joined
    from its packages into the cache directory then)."""
    if fake:
        return "llmrtc serve: opening the fake engines..."
    opening = "llmrtc serve: opening the model and the speech engines"
    api = bool(os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"))
    if mode == "openai" or (mode == "auto" and api):
        return f"{opening}..."
    from llmrtc.llm.local.weights import LOCAL_MODELS, cache_dir_for

    spec = LOCAL_MODELS.get(os.environ.get("LLMRTC_MODEL") or "1.5b", LOCAL_MODELS["1.5b"])
    joined = cache_dir_for(None) / spec.filename
    if joined.is_file() and joined.stat().st_size == spec.size_bytes:
        return f"{opening} (about {_LATER_START_SECONDS} s)..."
    return (
        f"{opening}: the first start takes about {_FIRST_START_SECONDS} s (joining the model "
        f"from its packages into {joined.parent}), later ones about {_LATER_START_SECONDS} s..."
    )


class ServeSetupError(Exception):
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
        api_key = os.environ.get("OPENAI_API_KEY")
        base_url = os.environ.get("OPENAI_BASE_URL")
        if not (api_key or base_url):
            raise ServeSetupError(
                "--llm openai needs OPENAI_API_KEY (or OPENAI_BASE_URL for an OpenAI-compatible "
                "server); use --llm offline for the offline model"
            )
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
    """The speech engines: the offline or OpenAI ones (`open_default_speech`), or the fakes."""
    from llmrtc.voice.speech import Speech, open_default_speech

    if fake:
        from llmrtc.testing import FakeSTT, FakeTTS, FakeVAD

        tts = FakeTTS()
        yield Speech(vad=FakeVAD(), stt=FakeSTT(tts=tts), tts=tts)
        return
    async with open_default_speech(
        progress=lambda stage, done: progress(f"speech: {stage}", done)
    ) as speech:
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
