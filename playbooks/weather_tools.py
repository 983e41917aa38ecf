"""Tools of playbooks/weather.yaml."""

from __future__ import annotations

from typing import Literal

from llmrtc import tool

_CITIES = {"tokyo": (21, "sunny"), "oslo": (4, "rainy"), "lima": (18, "cloudy")}


@tool(timeout=5.0)
async def lookupWeather(
    city: str, units: Literal["celsius", "fahrenheit"] = "celsius"
) -> dict[str, object]:
    """Look up the current weather for a city.

    Args:
        city: City name, e.g. "Tokyo".
        units: Temperature units.
    """
    celsius, conditions = _CITIES.get(city.lower(), (15, "mild"))
    temperature = celsius if units == "celsius" else round(celsius * 9 / 5 + 32)
    return {"city": city, "temperature": temperature, "units": units, "conditions": conditions}
