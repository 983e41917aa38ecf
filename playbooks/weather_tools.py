"""Tools of playbooks/weather.yaml.

A demo's weather service knows a few cities. Like a real one it finds a city the way people
(and a speech recognizer) spell it ("tokio", "Osloh") and says when it has no data for a name
("Oswald"), so the agent can ask again instead of passing on weather that was never looked up.
"""

from __future__ import annotations

import difflib
from typing import Literal

from llmrtc import ToolError, tool

_CITIES = {
    "tokyo": (21, "sunny"),
    "oslo": (4, "rainy"),
    "lima": (18, "cloudy"),
    "berlin": (9, "overcast"),
    "rome": (19, "sunny"),
    "new york": (12, "windy"),
    "london": (11, "drizzly"),
    "paris": (14, "cloudy"),
    "sydney": (24, "sunny"),
    "cairo": (30, "clear"),
}


def find_city(name: str) -> str | None:
    """The known city `name` spells, allowing for case, blanks and a small misspelling."""
    key = " ".join(name.lower().replace(",", " ").split())
    if key in _CITIES:
        return key
    close = difflib.get_close_matches(key, _CITIES, n=1, cutoff=0.8)
    return close[0] if close else None


@tool(timeout=5.0)
async def lookupWeather(
    city: str, units: Literal["celsius", "fahrenheit"] = "celsius"
) -> dict[str, object]:
    """Look up the current weather for a city.

    Args:
        city: City name, e.g. "Tokyo".
        units: Temperature units.
    """
    found = find_city(city)
    if found is None:
        raise ToolError(f"No weather data for {city!r}. Ask the caller to say the city again.")
    celsius, conditions = _CITIES[found]
    temperature = celsius if units == "celsius" else round(celsius * 9 / 5 + 32)
    return {
        "city": found.title(),
        "temperature": temperature,
        "units": units,
        "conditions": conditions,
    }
