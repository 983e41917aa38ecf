"""Print the OpenTelemetry spans of a tool batch with the SDK's console exporter.

Run: `python demos/otel_console.py`  (add `--content` to record arguments and results too;
the card number stays masked either way).

The tools make spans of their own, as an instrumented HTTP client or database driver would:
each one is printed as a child of its tool's `execute_tool` span (see `parent_id`), for the
async `lookup_weather` and for the sync `pay`, which runs in a worker thread.
"""

from __future__ import annotations

import sys

import anyio
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, PeriodicExportingMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

from llmrtc import OpenTelemetryHooks, ToolCall, ToolExecutor, ToolRegistry, tool

# What an instrumentation library does: take a tracer from the global provider.
tracer = trace.get_tracer("demo.instrumentation")


@tool
async def lookup_weather(city: str) -> dict[str, object]:
    """Current weather for a city.

    Args:
        city: City name.
    """
    with tracer.start_as_current_span("GET https://weather.example/v1/current"):
        await anyio.sleep(0.02)
    return {"city": city, "temperature": 21}


@tool(timeout=0.05)
async def slow_forecast(city: str) -> str:
    """A forecast that takes too long."""
    await anyio.sleep(1)
    return city


@tool(sensitive_fields=["card_number"])
def pay(card_number: str, amount: float) -> str:
    """Pay with a card (its number is always masked in telemetry).

    Args:
        card_number: The card number.
        amount: The amount.
    """
    with tracer.start_as_current_span("INSERT payments"):  # in the tool's worker thread
        return f"charged {amount} to {card_number}"


async def main(capture_content: bool) -> None:
    # The demo owns its providers; llmrtc never installs a global one. The application may:
    # here it does, so the tools' own instrumentation (the global tracer) reaches the console.
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    trace.set_tracer_provider(tracer_provider)
    metric_reader = PeriodicExportingMetricReader(
        ConsoleMetricExporter(), export_interval_millis=60_000
    )
    meter_provider = MeterProvider(metric_readers=[metric_reader])
    hooks = OpenTelemetryHooks(
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        capture_content=capture_content,
    )
    executor = ToolExecutor(ToolRegistry([lookup_weather, slow_forecast, pay]), hooks=hooks)
    with tracer_provider.get_tracer("demo").start_as_current_span("demo turn"):
        results = await executor.execute(
            [
                ToolCall("call_1", "lookup_weather", {"city": "Tokyo"}),
                ToolCall("call_2", "slow_forecast", {"city": "Oslo"}),
                ToolCall("call_3", "pay", {"card_number": "4111111111111111", "amount": 12.5}),
                ToolCall("call_4", "lookup_wether", {"city": "Lima"}),
            ],
            session_id="demo-session",
        )
    for result in results:
        print(f"# {result.call_id} {result.tool_name}: {result.status}", file=sys.stderr)
    meter_provider.shutdown()  # flushes the metrics to the console
    tracer_provider.shutdown()


if __name__ == "__main__":
    anyio.run(main, "--content" in sys.argv)
