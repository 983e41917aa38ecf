"""The plain HTTP side of the server's one port: the static web client, `/healthz`, and 404.

websockets calls `StaticFiles.__call__` (its `process_request` hook) for every request before
the WebSocket handshake: returning a response answers the request as plain HTTP; returning None
lets the handshake go on (only at `/ws`).
"""

from __future__ import annotations

import mimetypes
from email.utils import formatdate
from pathlib import Path

from websockets.asyncio.server import ServerConnection
from websockets.datastructures import Headers
from websockets.http11 import Request, Response

__all__ = ["WEB_ROOT", "WS_PATH", "StaticFiles"]

WEB_ROOT = Path(__file__).resolve().parent / "web"
"""The web client's files (`index.html`, `app.js`, `style.css`), served at `/`."""
WS_PATH = "/ws"
"""Where the signalling WebSocket listens."""
_MAX_FILE_BYTES = 8 * 1024 * 1024
_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".wav": "audio/wav",
}


class StaticFiles:
    """Serves the files under `root` (no listing, no path outside it) as websockets'
    `process_request` hook; `/ws` goes on to the WebSocket handshake."""

    def __init__(self, root: Path = WEB_ROOT) -> None:
        """Serve `root` (a missing folder serves only 404s)."""
        self.root = root.resolve()

    def __call__(self, connection: ServerConnection, request: Request) -> Response | None:
        """The response for `request`, or None to go on with the WebSocket handshake."""
        path = request.path.split("?", 1)[0].split("#", 1)[0]
        if path == WS_PATH:
            return None
        if path == "/healthz":
            return _response(200, "OK", b"ok\n", "text/plain; charset=utf-8")
        file = self._file(path)
        if file is None:
            return _response(404, "Not Found", b"not found\n", "text/plain; charset=utf-8")
        try:
            body = file.read_bytes()
        except OSError:
            return _response(404, "Not Found", b"not found\n", "text/plain; charset=utf-8")
        kind = _TYPES.get(file.suffix.lower()) or (
            mimetypes.guess_type(file.name)[0] or "application/octet-stream"
        )
        return _response(200, "OK", body, kind)

    def _file(self, path: str) -> Path | None:
        if not path.startswith("/") or "\\" in path or "\x00" in path:
            return None
        relative = path.lstrip("/") or "index.html"
        parts = relative.split("/")
        # No dot files, no `..`, no empty segments: only plain names under the root.
        if any(not part or part.startswith(".") for part in parts):
            return None
        file = (self.root / relative).resolve()
        if not file.is_relative_to(self.root) or not file.is_file():
            return None
        if file.stat().st_size > _MAX_FILE_BYTES:
            return None
        return file


def _response(status: int, reason: str, body: bytes, content_type: str) -> Response:
    headers = Headers(
        [
            ("Date", formatdate(usegmt=True)),
            ("Content-Type", content_type),
            ("Content-Length", str(len(body))),
            ("Cache-Control", "no-cache"),
            ("X-Content-Type-Options", "nosniff"),
            ("Connection", "close"),
        ]
    )
    return Response(status, reason, headers, body)
