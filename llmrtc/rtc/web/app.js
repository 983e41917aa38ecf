// The llmrtc web client: one voice session with the agent over WebRTC.
//
// Static, no build step, no third-party code: the server serves these files as they are. It
// speaks the wire protocol in docs/protocol.md (version 1): signalling on the WebSocket /ws,
// audio both ways over WebRTC, events on the "events" data channel once it is open (on the
// WebSocket before). view.js draws the page; this module connects, resumes and keeps counts.
import { createView } from "./view.js";

const PROTOCOL = 1;
const STORAGE_KEY = "llmrtc.session"; // {session_id, resume_token}: a reload or drop can resume
// Written when this tab's page unloads (a reload, a navigation), read and cleared on load: a
// saved session is resumed at once only by the same tab's next page. A duplicated tab (Chrome's
// "Duplicate", window.open) gets a copy of sessionStorage while the original lives, without
// this mark, and would otherwise take the live call away from the original.
const UNLOADED_KEY = "llmrtc.unloaded";
// Automatic resume after a lost connection: a few tries, well inside the server's resume_ttl
// (120 s by default), then the page gives up and says so.
const RESUME_DELAYS_MS = [300, 1000, 2000, 4000, 8000];
const STATS_INTERVAL_MS = 500;
const MAX_KEPT_EVENTS = 1000;
// A person's microphone keeps the browser's echo canceller, noise suppressor and gain control
// on: without echo cancellation an agent on laptop speakers hears itself and barges in on
// itself. Test only (docs/protocol.md): `?test_raw_mic=1` turns them off for Chromium's fake
// microphone, a WAV file with no room to cancel, whose speech they would change for the
// server's VAD and STT (ARCHITECTURE.md's measurements).
const RAW_MIC = new URLSearchParams(location.search).get("test_raw_mic") === "1";
const MIC_CONSTRAINTS = {
  audio: { echoCancellation: !RAW_MIC, noiseSuppression: !RAW_MIC, autoGainControl: !RAW_MIC },
  video: false,
};
// Errors after which the server closes the connection: never resumed automatically.
const FINAL_ERRORS = new Set([
  "server_full", "shutting_down", "resume_refused", "bad_offer", "unsupported_protocol",
  "idle_timeout", "internal", "session_replaced",
]);

// What tests (and curious people in the console) can read as `window.llmrtc`:
// state (idle|connecting|connected|reconnecting|ended|error), sessionId, resumed (the last
// `session` said so), resumes (automatic resume attempts), dataChannelOpen, audioPackets and
// audioEnergy (the agent's audio: inbound-rtp packetsReceived and totalAudioEnergy, summed
// over connections), eventsReceived / eventsByType / events (every server message, newest
// MAX_KEPT_EVENTS), rttMs (data-channel ping when it opens), micEnabled, micBitrate (the microphone's Opus
// target), micProcessing (the microphone track's echoCancellation, noiseSuppression and
// autoGainControl settings), iceSent (candidates trickled), connectMs (Connect to media connected).
// Controls: connect(), hangUp(), sendText(text), simulateDrop() (a network failure).
const counters = {
  state: "idle", sessionId: null, resumed: false, resumes: 0, dataChannelOpen: false,
  audioPackets: 0, audioEnergy: 0, eventsReceived: 0, eventsByType: {}, events: [],
  rttMs: null, micEnabled: false, micBitrate: null, micProcessing: null, iceSent: 0,
  connectMs: null,
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
    ui.input.focus(); // typing works at once, after Connect or a resume
    if (m.resumed && m.history && m.history.length) {
      view.note("Reconnected: the conversation goes on.");
    }
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
  tool_call_started: (m) => view.toolStarted(m.call_id, m.name, m.background === true),
  tool_call_progress: (m) => view.toolProgress(m.call_id, m.message),
  tool_call_finished: (m) =>
    view.toolFinished(m.call_id, m.name, m.status, m.duration_ms, m.reused_from),
  approval_requested: (m) => view.approvalRequested(m.call_id, m.name, m.arguments,
    (approved) => send({ type: "approve", call_id: m.call_id, approved })),
  stage_changed: (m) => view.stage(m.to_stage, m.from_stage),
  agent_speech_started: () => view.agentSpeaking(true),
  agent_speech_ended: (m) => view.agentSpeechEnded(m.interrupted, m.heard_text),
  interruption: (m) => view.interruption(m.kind, m.heard_text),
  turn_completed(m) {
    view.turnCompleted(m.text, m.stop_reason);
    if (m.stop_reason !== "error") view.clearTurnError();
  },
  error(m) {
    if (call && FINAL_ERRORS.has(m.code)) call.finalError = m.code;
    // A refused automatic or on-load resume is tried again (lost()); only giving up shows an
    // error.
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
    const settings = mic.getAudioTracks()[0]?.getSettings() || {};
    counters.micProcessing = {
      echoCancellation: settings.echoCancellation ?? null,
      noiseSuppression: settings.noiseSuppression ?? null,
      autoGainControl: settings.autoGainControl ?? null,
    };
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

// `automatic`: a resume after a lost connection; `onLoad`: the resume of the session saved
// before a reload. Both are retried on RESUME_DELAYS_MS when refused (another worker may still
// be saving the session); a resume from a click is not.
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

// `ended`: the user hung up (the server stops every tool, background ones too), rather than
// the connection being lost (background calls run on, for a resume).
function teardown(current, ended = false) {
  for (const timer of current.timers) clearInterval(timer);
  current.ws.onclose = null;
  current.pc.onconnectionstatechange = null;
  try {
    current.dc.close();
  } catch {}
  current.pc.close();
  if (current.ws.readyState <= WebSocket.OPEN) current.ws.close(1000);
  counters.dataChannelOpen = false;
  view.connectionClosed(ended);
}

// The connection went away without our `end`: resume it if the server lets us.
function lost(current) {
  if (call !== current) return;
  call = null;
  view.replyCut("Cut when the connection was lost");
  teardown(current);
  view.setReady(false);
  const code = current.finalError;
  if (code === "session_replaced") {
    // Another tab or window resumed this conversation: it goes on there. Our token is void and
    // the microphone belongs to that tab now: nothing to retry.
    forgetSession();
    resumeTry = 0;
    return giveUp(code, "Continued elsewhere", "ended");
  }
  // With several server workers the old one may still be saving the session when a resume
  // reaches another: a resume nobody clicked for tries again on the remaining delays.
  const unasked = current.automatic || current.onLoad;
  if (code === "resume_refused" && unasked && resumeTry < RESUME_DELAYS_MS.length) {
    return retryResume(current);
  }
  if (current.onLoad && code) {
    // The resume on load did not happen: the page is a fresh one that says why. A session
    // the server no longer has is forgotten; a busy or restarting server keeps it for Connect.
    if (code === "resume_refused") forgetSession();
    resumeTry = 0;
    view.showError(code === "server_full" ? "server_full_saved" : code);
    return giveUp(null, "Not connected", "idle");
  }
  if (code === "resume_refused") {
    forgetSession();
    resumeTry = 0;
    if (!current.automatic) return connect(); // a stale saved session: start a new one
    return giveUp("connection_lost", "Disconnected");
  }
  if (code) {
    // The saved session stays: the server keeps an idle or shut-down session resumable, and
    // Connect starts afresh by itself if the server no longer has it (resume_refused).
    return giveUp(null, code === "idle_timeout" ? "Closed (idle)" : "Not connected");
  }
  if (!current.admitted && !current.automatic) return giveUp("unreachable", "Could not connect");
  if (resumeTry >= RESUME_DELAYS_MS.length) {
    resumeTry = 0;
    return giveUp("connection_lost", "Disconnected");
  }
  retryResume({ automatic: true, onLoad: false });
}

// Try the saved session again after the next of RESUME_DELAYS_MS, as `previous` did.
function retryResume(previous) {
  const saved = savedSession();
  if (!saved) {
    resumeTry = 0;
    return giveUp("connection_lost", "Disconnected");
  }
  if (previous.automatic) view.setStatus("reconnecting", "Connection lost: reconnecting…");
  const delay = RESUME_DELAYS_MS[resumeTry];
  resumeTry += 1;
  counters.resumes += 1;
  const options = { resume: saved, automatic: previous.automatic, onLoad: previous.onLoad };
  resumeTimer = setTimeout(() => connect(options).catch(unreachable), delay);
}

function unreachable(error) {
  console.error("llmrtc: connect failed", error);
  giveUp("unreachable", "Could not connect");
}

// No connection and none coming: say why, and let go of the microphone.
function giveUp(code, statusText, state = "error") {
  if (code) view.showError(code);
  releaseMic();
  view.setStatus(state, statusText);
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
    teardown(current, true);
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
  connect({ resume: saved }).catch(unreachable);
});
ui.hangup.addEventListener("click", hangUp);
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

// --- on load --------------------------------------------------------------------------------

// A reload keeps the tab's saved session: take the conversation back at once, no click. Only
// after this tab's own page unloaded (see UNLOADED_KEY): a duplicate of a live tab waits for
// Connect instead of silently taking the call.
window.addEventListener("pagehide", () => sessionStorage.setItem(UNLOADED_KEY, "1"));
const reloaded = sessionStorage.getItem(UNLOADED_KEY) !== null;
sessionStorage.removeItem(UNLOADED_KEY);
const savedOnLoad = savedSession();
if (savedOnLoad && reloaded) connect({ resume: savedOnLoad, onLoad: true }).catch(unreachable);
