"""`InMemoryTelemetry`: OpenTelemetry SDK providers that keep spans and metrics in memory, with
`OpenTelemetryHooks` on them, so a test can assert what a trace would show.

Example:
    telemetry = InMemoryTelemetry()
    executor = ToolExecutor(registry, hooks=telemetry.hooks)
    await executor.execute([ToolCall("c1", "lookup_weather", {"city": "Oslo"})])
    span = telemetry.span("execute_tool lookup_weather")
    assert span.attributes["llmrtc.tool.status"] == "ok"
    assert telemetry.children(span) == []  # the spans the handler created itself
"""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer

from llmrtc.telemetry.otel import OpenTelemetryHooks

__all__ = ["InMemoryTelemetry"]


class InMemoryTelemetry:
    """A tracer provider exporting finished spans to memory (synchronously, as each ends), a
    meter provider read on demand, and `hooks`: `OpenTelemetryHooks` writing to both. Nothing
    global is installed."""

    def __init__(self, *, capture_content: bool = False) -> None:
        """Create the providers and the hooks.

        Args:
            capture_content: Passed to `hooks` (record arguments, results, texts).
        """
        self.exporter = InMemorySpanExporter()
        """Holds every finished span."""
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        """Collects the metrics when `points` asks."""
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self.hooks = self.new_hooks(capture_content=capture_content)
        """`OpenTelemetryHooks` on these providers."""

    def new_hooks(self, *, capture_content: bool = False) -> OpenTelemetryHooks:
        """Another `OpenTelemetryHooks` on the same providers (e.g. one per session)."""
        return OpenTelemetryHooks(
            tracer_provider=self.tracer_provider,
            meter_provider=self.meter_provider,
            capture_content=capture_content,
        )

    def tracer(self, name: str = "test") -> Tracer:
        """A tracer on the same provider, for spans of your own (a caller's, a handler's)."""
        return self.tracer_provider.get_tracer(name)

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        """The finished spans, in the order they ended; only those called `name` if given."""
        finished = list(self.exporter.get_finished_spans())
        return finished if name is None else [s for s in finished if s.name == name]

    def span(self, name: str) -> ReadableSpan:
        """The one finished span called `name`.

        Raises:
            LookupError: None or several have that name (the message lists what ended).
        """
        found = self.spans(name)
        if len(found) != 1:
            ended = sorted({s.name for s in self.spans()})
            raise LookupError(f"{len(found)} finished spans named {name!r}; spans: {ended}")
        return found[0]

    def children(self, parent: ReadableSpan) -> list[ReadableSpan]:
        """The finished spans whose parent is `parent`, in the order they ended."""
        span_id = parent.context.span_id if parent.context is not None else None
        return [s for s in self.spans() if s.parent is not None and s.parent.span_id == span_id]

    def points(self, metric: str) -> list[Any]:
        """The data points of `metric` collected now (empty if it has none yet)."""
        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics if data is not None else ():
            for scope in resource.scope_metrics:
                for item in scope.metrics:
                    if item.name == metric:
                        return list(item.data.data_points)
        return []

    def clear(self) -> None:
        """Forget the finished spans (metrics keep accumulating, as in production)."""
        self.exporter.clear()
