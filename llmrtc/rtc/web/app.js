// The llmrtc web client: one voice session with the agent over WebRTC.
//
// Static, no build step, no third-party code: the server serves these files as they are. It
// speaks the wire protocol in docs/protocol.md (version 1): signalling on the WebSocket /ws,
// audio both ways over WebRTC, events on the "events" data channel once it is open (on the
// WebSocket before). view.js draws the page; this module connects, resumes and keeps counts.
import { createView } from "./view.js";

const PROTOCOL = 1;
const STORAGE_KEY = "llmrtc.session"; // {session_id, resume_token}: a reload or drop can resume
// Automatic resume after a lost connection: a few tries, well inside the server's resume_ttl
// (120 s by default), then the page gives up and says so.
const RESUME_DELAYS_MS = [300, 1000, 2000, 4000, 8000];
const STATS_INTERVAL_MS = 500;
const MAX_KEPT_EVENTS = 1000;
// Off, as ARCHITECTURE.md's Chromium measurements ask: the browser's echo canceller, noise
// suppressor and gain control are tuned for a person in a room and change the speech the
// server's VAD and STT hear. (With loudspeakers, a headset keeps the agent from hearing itself.)
const MIC_CONSTRAINTS = {
  audio: { echoCancellation: false, noiseSuppression: false, autoGainControl: false },
  video: false,
};
// Errors after which the server closes the connection: never resumed automatically.
const FINAL_ERRORS = new Set([
  "server_full", "shutting_down", "resume_refused", "bad_offer", "unsupported_protocol",
  "idle_timeout", "internal",
]);

// What tests (and curious people in the console) can read as `window.llmrtc`:
// state (idle|connecting|connected|reconnecting|ended|error), sessionId, resumed (the last
// `session` said so), resumes (automatic resume attempts), dataChannelOpen, audioPackets and
// audioEnergy (the agent's audio: inbound-rtp packetsReceived and totalAudioEnergy, summed
// over connections), eventsReceived / eventsByType / events (every server message, newest
// MAX_KEPT_EVENTS), rttMs (data-channel ping when it opens), micEnabled, micBitrate (the microphone's Opus
// target), iceSent (candidates trickled), connectMs (Connect to media connected).
// Controls: connect(), hangUp(), sendText(text), simulateDrop() (a network failure).
const counters = {
  state: "idle", sessionId: null, resumed: false, resumes: 0, dataChannelOpen: false,
  audioPackets: 0, audioEnergy: 0, eventsReceived: 0, eventsByType: {}, events: [],
  rttMs: null, micEnabled: false, micBitrate: null, iceSent: 0, connectMs: null,
};

const view = createView(document, (state) => {
  counters.state = state;
});
const { ui } = view;

let call = null; // the live connection: {ws, pc, dc, ...}; null when not connected
let mic = null; // the microphone stream, kept across resumes (no second permission prompt)
let resumeTry = 0;
let resumeTimer = null;
let attempts = 0; // bumped by every connect and hang-up: a connect that lost the race stops

// --- saved session (sessionStorage: this tab only, gone when the tab closes) ----------------

function savedSession() {
  try {
    return JSON.parse(sessionStorage.getItem(STORAGE_KEY) || "null");
  } catch {
    return null;
  }
}

function saveSession(sessionId, token) {
  sessionStorage.setItem(STORAGE_KEY, JSON.stringify({ session_id: sessionId, resume_token: token }));
}

function forgetSession() {
  sessionStorage.removeItem(STORAGE_KEY);
}

// --- the server's messages ------------------------------------------------------------------

function handle(raw, via) {
  let message;
  try {
    message = JSON.parse(raw);
  } catch {
    return; // the protocol says clients ignore what they cannot read
  }
  if (!message || typeof message.type !== "string") return;
  counters.eventsReceived += 1;
  counters.eventsByType[message.type] = (counters.eventsByType[message.type] || 0) + 1;
  counters.events.push({ ...message, via });
  if (counters.events.length > MAX_KEPT_EVENTS) counters.events.shift();
  const handler = HANDLERS[message.type];
  if (handler) handler(message);
}

const HANDLERS = {
  session(m) {
    counters.sessionId = m.session_id;
    counters.resumed = Boolean(m.resumed);
    saveSession(m.session_id, m.resume_token);
    // Exactly the conversation the agent remembers: nothing on a new session (the agent
    // remembers nothing of a hung-up one), the restored turns on a resume (also after a reload).
    view.showConversation(m.history);
    if (m.stage) view.stage(m.stage); // a playbook's stage (after a resume, its own)
    if (call) call.admitted = true;
    resumeTry = 0;
    view.setReady(true);
    if (m.resumed) view.note("Reconnected: the conversation goes on.");
  },
  async answer(m) {
    if (!call) return;
    try {
      await call.pc.setRemoteDescription({ type: "answer", sdp: m.sdp });
    } catch (error) {
      console.error("llmrtc: the server's answer was refused", error);
      hangUp();
      giveUp("bad_offer", "Not connected");
    }
  },
  async ice(m) {
    if (!call || !m.candidate || !m.candidate.candidate) return; // null or "": no more
    try {
      await call.pc.addIceCandidate(m.candidate);
    } catch (error) {
      console.warn("llmrtc: a server ICE candidate was refused", error);
    }
  },
  speech_started: () => view.userSpeaking(true),
  speech_ended: () => view.userSpeaking(false),
  transcript: (m) => view.transcript(m.text, m.final),
  assistant_text: (m) => view.assistantDelta(m.delta),
  tool_call_started: (m) => view.toolStarted(m.call_id, m.name),
  tool_call_finished: (m) => view.toolFinished(m.call_id, m.name, m.status, m.duration_ms),
  stage_changed: (m) => view.stage(m.to_stage, m.from_stage),
  agent_speech_started: () => view.agentSpeaking(true),
  agent_speech_ended: (m) => view.agentSpeechEnded(m.interrupted, m.heard_text),
  barge_in: (m) => view.bargeIn(m.heard_text),
  turn_completed: (m) => view.turnCompleted(m.text, m.stop_reason),
  error(m) {
    if (call && FINAL_ERRORS.has(m.code)) call.finalError = m.code;
    // A refused automatic resume is tried again (lost()); only giving up shows an error. A
    // refused resume on load is explained by lost() as it falls back to "Not connected".
    if (m.code === "resume_refused" && call && (call.automatic || call.onLoad)) return;
    view.showError(m.code, m.message);
  },
  pong(m) {
    if (call && call.pings.has(m.id)) {
      counters.rttMs = performance.now() - call.pings.get(m.id);
      call.pings.delete(m.id);
      view.setRoundTrip(counters.rttMs);
    }
  },
};

// --- connecting -----------------------------------------------------------------------------

async function openMic() {
  if (mic && mic.getAudioTracks().some((t) => t.readyState === "live")) return mic;
  try {
    mic = await navigator.mediaDevices.getUserMedia(MIC_CONSTRAINTS);
    view.setMic("Microphone on: just talk");
    counters.micEnabled = true;
  } catch (error) {
    // Go on without it: the agent still talks, and the user can type.
    mic = null;
    counters.micEnabled = false;
    view.showError(error && error.name === "NotFoundError" ? "mic_missing" : "mic_refused");
    view.setMic("Microphone off: type below");
  }
  return mic;
}

function send(message) {
  // Client messages may go on either channel; the data channel is the faster path.
  if (call && call.dc.readyState === "open") call.dc.send(JSON.stringify(message));
  else if (call) sendOn(call, message);
}

function sendOn(current, message) {
  if (current.ws.readyState === WebSocket.OPEN) current.ws.send(JSON.stringify(message));
}

// `automatic`: a resume after a lost connection (retried on RESUME_DELAYS_MS); `onLoad`: the
// resume of the session saved before a reload (tried once: refused, the page is a fresh one).
async function connect({ resume = null, automatic = false, onLoad = false } = {}) {
  if (call) return;
  clearTimeout(resumeTimer);
  const attempt = ++attempts;
  if (!automatic) view.clearError();
  if (automatic) view.setStatus("reconnecting", "Reconnecting…");
  else view.setStatus("connecting", onLoad ? "Resuming…" : "Connecting…");
  const stream = await openMic();
  if (attempt !== attempts) return; // hung up while the browser asked for the microphone
  const ws = new WebSocket(`${location.origin.replace(/^http/, "ws")}/ws`);
  const pc = new RTCPeerConnection({ iceServers: [] });
  // The channel must exist before the offer: an SDP answer cannot add one.
  const dc = pc.createDataChannel("events");
  const current = {
    ws, pc, dc, resume, automatic, onLoad, admitted: false, finalError: null, begun: performance.now(),
    offerSent: false, pendingIce: [], pings: new Map(), timers: [],
  };
  call = current;

  if (stream) {
    for (const track of stream.getAudioTracks()) pc.addTrack(track, stream);
  } else {
    pc.addTransceiver("audio", { direction: "recvonly" }); // hear the agent, type to it
  }
  pc.ontrack = (event) => view.playRemote(event.streams[0] || new MediaStream([event.track]));
  pc.onicecandidate = (event) => {
    const message = { type: "ice", candidate: event.candidate ? event.candidate.toJSON() : null };
    counters.iceSent += 1;
    if (current.offerSent) sendOn(current, message);
    else current.pendingIce.push(message); // candidates go after the offer, never before
  };
  pc.onconnectionstatechange = () => {
    if (call !== current) return;
    if (pc.connectionState === "connected") {
      counters.connectMs = performance.now() - current.begun;
      view.setStatus("connected", current.resume ? "Connected (resumed)" : "Connected");
    } else if (pc.connectionState === "failed") {
      lost(current);
    }
  };
  dc.onopen = () => {
    if (call !== current) return;
    counters.dataChannelOpen = true;
    // One round-trip measure, not a heartbeat: the server counts every client message as
    // activity, and a periodic ping would keep a forgotten tab's session from idling out.
    ping(current);
  };
  dc.onclose = () => {
    if (call === current) counters.dataChannelOpen = false;
  };
  dc.onmessage = (event) => {
    if (call === current) handle(event.data, "datachannel");
  };
  ws.onmessage = (event) => {
    if (call !== current) return;
    if (typeof event.data === "string") handle(event.data, "websocket");
    else event.data.text().then((text) => call === current && handle(text, "websocket"));
  };
  ws.onclose = () => {
    if (call === current) lost(current);
  };
  current.timers.push(setInterval(() => readStats(current), STATS_INTERVAL_MS));

  try {
    await pc.setLocalDescription(await pc.createOffer());
  } catch (error) {
    console.error("llmrtc: could not create an offer", error);
    hangUp();
    giveUp("bad_offer", "Not connected");
    return;
  }
  const sendOffer = () => {
    if (call !== current) return;
    if (resume) {
      const { session_id, resume_token: token } = resume;
      sendOn(current, { type: "resume", session_id, token, protocol: PROTOCOL });
    }
    sendOn(current, { type: "offer", sdp: pc.localDescription.sdp, protocol: PROTOCOL });
    current.offerSent = true;
    for (const message of current.pendingIce.splice(0)) sendOn(current, message);
  };
  if (ws.readyState === WebSocket.OPEN) sendOffer();
  else ws.addEventListener("open", sendOffer, { once: true });
}

function ping(current) {
  if (current.dc.readyState !== "open") return;
  const id = String(Math.floor(Math.random() * 1e9));
  current.pings.set(id, performance.now());
  current.dc.send(JSON.stringify({ type: "ping", id }));
}

async function readStats(current) {
  let stats;
  try {
    stats = await current.pc.getStats();
  } catch {
    return;
  }
  if (call !== current) return;
  stats.forEach((report) => {
    if (report.type === "inbound-rtp" && report.kind === "audio") {
      // Counters restart with each peer connection; the page keeps a running total.
      const packets = report.packetsReceived || 0;
      const energy = report.totalAudioEnergy || 0;
      counters.audioPackets += packets - (current.packets || 0);
      counters.audioEnergy += energy - (current.energy || 0);
      current.packets = packets;
      current.energy = energy;
    }
    if (report.type === "outbound-rtp" && report.kind === "audio") {
      counters.micBitrate = report.targetBitrate || null; // the encoder's target, bits/s
    }
  });
}

function teardown(current) {
  for (const timer of current.timers) clearInterval(timer);
  current.ws.onclose = null;
  current.pc.onconnectionstatechange = null;
  try {
    current.dc.close();
  } catch {}
  current.pc.close();
  if (current.ws.readyState <= WebSocket.OPEN) current.ws.close(1000);
  counters.dataChannelOpen = false;
  view.connectionClosed();
}

// The connection went away without our `end`: resume it if the server lets us.
function lost(current) {
  if (call !== current) return;
  call = null;
  view.replyCut("Cut when the connection was lost");
  teardown(current);
  view.setReady(false);
  const code = current.finalError;
  if (current.onLoad && code === "resume_refused") {
    // The session saved before the reload is gone (expired or ended): the page is a fresh
    // one, and says why the conversation is not back. (Another refusal, e.g. server_full,
    // keeps the saved session for Connect, as below.)
    forgetSession();
    releaseMic();
    view.showError(code);
    return view.setStatus("idle", "Not connected");
  }
  // With several server workers the old one may still be saving the session when a resume
  // reaches another: an automatic resume tries again on the remaining delays before letting go.
  const retryRefused = current.automatic && resumeTry < RESUME_DELAYS_MS.length;
  if (code === "resume_refused" && !retryRefused) {
    forgetSession();
    resumeTry = 0;
    if (!current.automatic) return connect(); // a stale saved session: start a new one
    return giveUp("connection_lost", "Disconnected");
  }
  if (code && code !== "resume_refused") {
    // The saved session stays: the server keeps an idle or shut-down session resumable, and
    // Connect starts afresh by itself if the server no longer has it (resume_refused).
    return giveUp(null, code === "idle_timeout" ? "Closed (idle)" : "Not connected");
  }
  const saved = savedSession();
  if (!current.admitted && !current.automatic) return giveUp("unreachable", "Could not connect");
  if (!saved || resumeTry >= RESUME_DELAYS_MS.length) {
    resumeTry = 0;
    return giveUp("connection_lost", "Disconnected");
  }
  view.setStatus("reconnecting", "Connection lost: reconnecting…");
  const delay = RESUME_DELAYS_MS[resumeTry];
  resumeTry += 1;
  counters.resumes += 1;
  resumeTimer = setTimeout(() => connect({ resume: saved, automatic: true }), delay);
}

// No connection and none coming: say why, and let go of the microphone.
function giveUp(code, statusText) {
  if (code) view.showError(code);
  releaseMic();
  view.setStatus("error", statusText);
}

function releaseMic() {
  if (!mic) return;
  for (const track of mic.getTracks()) track.stop();
  mic = null;
  counters.micEnabled = false;
  view.setMic("Microphone off");
}

// Hang up: `end` makes the session final on the server, so there is nothing left to resume.
function hangUp() {
  clearTimeout(resumeTimer);
  attempts += 1;
  const current = call;
  call = null;
  if (current) {
    view.replyCut("Cut when you hung up");
    sendOn(current, { type: "end" });
    teardown(current);
  }
  forgetSession();
  releaseMic();
  view.setReady(false);
  view.setStatus("ended", "Call ended");
}

// --- the controls ---------------------------------------------------------------------------

ui.connect.addEventListener("click", () => {
  resumeTry = 0;
  const saved = savedSession(); // a reload, or an idle close: take the conversation back
  connect({ resume: saved }).catch((error) => {
    console.error("llmrtc: connect failed", error);
    giveUp("unreachable", "Could not connect");
  });
});
ui.hangup.addEventListener("click", hangUp);

// A reload keeps the tab's saved session: take the conversation back at once, no click.
const savedOnLoad = savedSession();
if (savedOnLoad) {
  connect({ resume: savedOnLoad, onLoad: true }).catch((error) => {
    console.error("llmrtc: resuming the saved session failed", error);
    giveUp(null, "Not connected");
  });
}
ui.interrupt.addEventListener("click", () => send({ type: "interrupt" }));
ui.form.addEventListener("submit", (event) => {
  event.preventDefault();
  const text = ui.input.value.trim();
  if (!text || !call) return;
  send({ type: "text", text });
  view.typed(text);
  ui.input.value = "";
  ui.input.focus();
});

window.llmrtc = Object.assign(counters, {
  connect: () => ui.connect.click(),
  hangUp,
  sendText: (text) => {
    ui.input.value = text;
    ui.form.requestSubmit();
  },
  // Drop the connection as a network failure would (no `end`): the page should resume.
  simulateDrop: () => {
    if (!call) return false;
    call.ws.onclose = null;
    call.ws.close(4000);
    lost(call);
    return true;
  },
});
