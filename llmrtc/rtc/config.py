"""`ServerConfig`: where an `RTCServer` listens and how it treats its sessions."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, get_args

from llmrtc.voice.config import VoiceConfig

__all__ = ["ApprovalMode", "ServerConfig"]

ApprovalMode = Literal["app", "client"]
"""Who approves tool calls that need it (`ServerConfig.approvals`)."""


@dataclass(frozen=True, kw_only=True)
class ServerConfig:
    """How an `RTCServer` listens, admits, times out and resumes sessions.

    Durations are seconds (floats). Every field is checked when the config is made.

    Example:
        ServerConfig(host="0.0.0.0", port=8080, max_sessions=10, idle_timeout=300.0)
    """

    host: str = "127.0.0.1"
    """Interface to listen on; a loopback host (`127.0.0.1`, `localhost`, `::1`) implies
    `loopback`."""
    port: int = 8080
    """TCP port for the page and the WebSocket; 0 picks a free one (read `server.port`)."""
    max_sessions: int = 10
    """Live sessions this process admits at once; one more gets `server_full`. A session frees
    its slot as it starts ending; while `2 * max_sessions` sessions are admitted and not yet
    done (live or still ending: finishing a tool, saving) a new one gets `server_full` too.
    One event loop keeps about 10 full-duplex sessions on time (ARCHITECTURE.md): run workers
    for more."""
    idle_timeout: float = 300.0
    """A session with no client message and no user speech for this long gets `idle_timeout`
    and is closed (it stays resumable for `resume_ttl`)."""
    offer_timeout: float = 10.0
    """A connection that sends no `offer` within this long gets `idle_timeout` and is closed
    (the web page asks for the microphone before it connects, so it offers at once)."""
    first_message_timeout: float = 3.0
    """A connection that sends no message at all within this long of connecting gets
    `idle_timeout` and is closed (capped by `offer_timeout`, which bounds the offer itself):
    the web page connects once it has the microphone and sends its offer at once, so a silent
    connection only holds one of the few places kept for connections with no session."""
    max_pending_per_address: int = 8
    """Connections from one IP address that have no session yet (not offered, or a resume
    waiting for its state) at once; one more gets `server_full`. Such connections hold no
    live slot; all addresses together may have `4 * max_sessions`, and one more closes the
    oldest one of the address that has the most (`server_full`). An IPv6 client counts by its
    /64 network (an IPv4-mapped address as IPv4). Behind a reverse proxy every client has the
    proxy's address: raise this to that proxy's share."""
    resume_ttl: float = 120.0
    """How long a session whose client vanished can be resumed with its token."""
    resume_wait: float = 3.0
    """How long a `resume` whose state is not (yet) saved waits for it, asking the store every
    0.1 s (another worker may still be saving it), before `resume_refused`. Every refused
    resume takes this long, whatever the session id, so refusals do not tell which sessions
    are live."""
    loopback: bool = False
    """Make ICE work over 127.0.0.1 with no STUN server (`create_peer(loopback=True)`): for a
    loopback-only host or a local test. Implied by a loopback `host`."""
    voice: VoiceConfig | None = None
    """Turn-taking, barge-in and output settings of each session's `VoiceLoop` (None: its
    defaults)."""
    reuse_port: bool = False
    """Bind with `SO_REUSEPORT`, so several processes (`llmrtc serve --workers N`) share the
    port and the kernel spreads connections among them."""
    shutdown_grace: float = 30.0
    """When the server is left (`async with` exit), live sessions get this long to end on
    their own; the rest are then closed with `shutting_down` (and stay resumable), their tool
    calls aborted, `"finish"` ones too (each gets its `aborted` result, kept in the saved
    history)."""
    approvals: ApprovalMode = "app"
    """Who answers for tools with `needs_approval`: `"app"`, the approver the application gave
    its `ToolExecutor` (`approve` messages are refused as `unexpected_message`); `"client"`,
    the session's own client: each call is sent as `approval_requested` (its
    `sensitive_fields` masked) and runs only after that client's `approve`. The agent
    factory's executors must be built with `approver=approve_in_context` for the client to be
    asked (without it such tools are refused when the executor is built)."""

    def __post_init__(self) -> None:
        if not isinstance(self.host, str) or not self.host.strip():
            raise ValueError(f"ServerConfig.host must be a non-empty string, got {self.host!r}")
        if isinstance(self.port, bool) or not isinstance(self.port, int):
            raise ValueError(f"ServerConfig.port must be an int 0-65535, got {self.port!r}")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"ServerConfig.port must be 0-65535 (0: any free), got {self.port}")
        count = self.max_sessions
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"ServerConfig.max_sessions must be an int >= 1, got {count!r}")
        pending = self.max_pending_per_address
        if isinstance(pending, bool) or not isinstance(pending, int) or pending < 1:
            raise ValueError(
                f"ServerConfig.max_pending_per_address must be an int >= 1, got {pending!r}"
            )
        for name in (
            "idle_timeout",
            "offer_timeout",
            "first_message_timeout",
            "resume_ttl",
            "resume_wait",
            "shutdown_grace",
        ):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value <= 0
            ):
                raise ValueError(
                    f"ServerConfig.{name} must be a finite number of seconds > 0, got {value!r}"
                )
        for name in ("loopback", "reuse_port"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(
                    f"ServerConfig.{name} must be True or False, got {getattr(self, name)!r}"
                )
        if self.approvals not in get_args(ApprovalMode):
            raise ValueError(
                f"ServerConfig.approvals must be 'app' (the application's approver answers) or "
                f"'client' (the session's client answers), got {self.approvals!r}"
            )
        if self.voice is not None and not isinstance(self.voice, VoiceConfig):
            raise ValueError(
                f"ServerConfig.voice must be a VoiceConfig or None, got {type(self.voice).__name__}"
            )

    @property
    def ice_loopback(self) -> bool:
        """Whether sessions use loopback ICE: `loopback`, or a loopback `host`."""
        from llmrtc.rtc.ice import is_loopback_host  # imports aioice: only when serving

        return self.loopback or is_loopback_host(self.host)
