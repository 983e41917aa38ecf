// The llmrtc web client: one voice session with the agent over WebRTC.
//
// Static, no build step, no third-party code: the server serves this file as is. It speaks the
// wire protocol in docs/protocol.md (version 1): signalling on the WebSocket /ws, audio both
// ways over WebRTC, events on the "events" data channel once it is open (on the WebSocket
// before). `window.llmrtc` exposes counters and a few controls for tests and for debugging.
"use strict";

(() => {
  const PROTOCOL = 1;
  const STORAGE_KEY = "llmrtc.session"; // {session_id, resume_token}: a reload or drop can resume
  // Automatic resume after a lost connection: a few tries, well inside the server's
  // resume_ttl (120 s by default), then the page gives up and says so.
  const RESUME_DELAYS_MS = [300, 1000, 2000, 4000, 8000];
  const STATS_INTERVAL_MS = 500;
  const TOOL_CLOCK_MS = 250; // how often a running tool call's elapsed time is redrawn
  const PING_INTERVAL_MS = 5000;
  const MAX_KEPT_EVENTS = 1000;
  // The browser's audio processing is for rooms with speakers; the server runs its own VAD and
  // a fake or headset microphone is cleaner without it (measured: it mangles synthetic speech).
  const MIC_CONSTRAINTS = {
    audio: { echoCancellation: false, noiseSuppression: false, autoGainControl: false },
    video: false,
  };
  // Errors after which the server closes the connection: never resumed automatically.
  const FINAL_ERRORS = new Set([
    "server_full", "shutting_down", "resume_refused", "bad_offer", "unsupported_protocol",
    "idle_timeout", "internal",
  ]);
  const ERROR_TEXT = {
    server_full: "The server is busy: every session is taken. Please try again in a minute.",
    shutting_down: "The server is restarting and takes no new calls. Please try again shortly.",
    resume_refused: "The earlier conversation could not be resumed (it expired or ended).",
    bad_offer: "This browser's audio setup was refused by the server.",
    unsupported_protocol: "This page is out of date for the server: reload it.",
    idle_timeout: "The call was closed after a long silence. Connect to pick it up again.",
    internal: "The server failed. Please connect again.",
    model_error: "The language model failed on that turn; the agent apologised. Go on talking.",
    mic_refused: "Microphone access was refused: the agent cannot hear you. Allow the " +
      "microphone in the site settings and connect again, or type below.",
    mic_missing: "No microphone was found: the agent cannot hear you. You can type below.",
    connection_lost: "The connection was lost and could not be restored. Connect to try again.",
    unreachable: "Could not reach the server. Check that it is running, then connect again.",
  };

  const $ = (id) => document.getElementById(id);
  const ui = {
    status: $("status"), stage: $("stage"), error: $("error"), connect: $("connect"),
    hangup: $("hangup"), transcript: $("transcript"), assistant: $("assistant"),
    tools: $("tool-calls"), form: $("text-form"), input: $("text-input"), send: $("send"),
    interrupt: $("interrupt"), audio: $("remote-audio"), micState: $("mic-state"),
    userActivity: $("user-activity"), agentActivity: $("agent-activity"),
  };

  // What tests (and curious people in the console) can read as `window.llmrtc`:
  // state (idle|connecting|connected|reconnecting|ended|error), sessionId, resumed (the last
  // `session` said so), resumes (automatic resume attempts), dataChannelOpen, audioPackets and
  // audioEnergy (the agent's audio: inbound-rtp packetsReceived and totalAudioEnergy, summed
  // over connections), eventsReceived / eventsByType / events (every server message, newest
  // MAX_KEPT_EVENTS), rttMs (data-channel ping), micEnabled, micBitrate (the microphone's
  // Opus target), iceSent (candidates trickled), connectMs (Connect to media connected).
  // Controls: connect(), hangUp(), sendText(text), simulateDrop() (a network failure).
  const counters = {
    state: "idle", sessionId: null, resumed: false, resumes: 0, dataChannelOpen: false,
    audioPackets: 0, audioEnergy: 0, eventsReceived: 0, eventsByType: {}, events: [],
    rttMs: null, micEnabled: false, micBitrate: null, iceSent: 0, connectMs: null,
  };

  let call = null; // the live connection: {ws, pc, dc, ...}; null when not connected
  let mic = null; // the microphone stream, kept across resumes (no second permission prompt)
  let resumeTry = 0;
  let resumeTimer = null;
  let attempts = 0; // bumped by every connect and hang-up: a connect that lost the race stops
  let currentReply = null; // the <li> of the agent's reply in progress
  let partialLine = null; // the <li> of a transcript that is not final yet
  const toolItems = new Map(); // call_id -> {item, started}: the calls still running
  let toolClock = null;

  // --- small UI helpers -----------------------------------------------------------------

  function setStatus(state, text) {
    counters.state = state;
    ui.status.dataset.state = state;
    ui.status.textContent = text;
    const live = state === "connecting" || state === "connected" || state === "reconnecting";
    ui.connect.disabled = live;
    ui.hangup.disabled = !live;
  }

  function setReady(ready) {
    ui.input.disabled = !ready;
    ui.send.disabled = !ready;
    ui.interrupt.disabled = !ready;
  }

  function showError(code, message) {
    ui.error.dataset.code = code;
    ui.error.textContent = ERROR_TEXT[code] || message || `Error: ${code}`;
    ui.error.hidden = false;
  }

  function clearError() {
    ui.error.hidden = true;
    ui.error.textContent = "";
    delete ui.error.dataset.code;
  }

  function addLine(list, text, className) {
    const item = document.createElement("li");
    if (className) item.className = className;
    item.textContent = text;
    list.append(item);
    list.scrollTop = list.scrollHeight;
    return item;
  }

  function note(list, text) {
    return addLine(list, text, "note");
  }

  function formatMs(ms) {
    return ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${ms.toFixed(1)} ms`;
  }

  // --- saved session (sessionStorage: this tab only, gone when the tab closes) ----------

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

  // --- the server's messages --------------------------------------------------------------

  function handle(raw, via) {
    let message;
    try {
      message = JSON.parse(raw);
    } catch {
      return; // not ours to fix; the protocol says clients ignore what they cannot read
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
      if (m.stage) ui.stage.textContent = m.stage; // a playbook's stage (after a resume, its own)
      if (call) call.admitted = true;
      resumeTry = 0;
      setReady(true);
      if (m.resumed) note(ui.assistant, "Reconnected: the conversation goes on.");
    },
    async answer(m) {
      if (!call) return;
      try {
        await call.pc.setRemoteDescription({ type: "answer", sdp: m.sdp });
      } catch (error) {
        console.error("llmrtc: the server's answer was refused", error);
        hangUp({ notify: true });
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
    speech_started() {
      ui.userActivity.hidden = false;
    },
    speech_ended() {
      ui.userActivity.hidden = true;
    },
    transcript(m) {
      if (!m.text) {
        if (partialLine && m.final) partialLine.remove();
        if (m.final) partialLine = null;
        return;
      }
      if (!partialLine) partialLine = addLine(ui.transcript, "", "partial");
      partialLine.textContent = m.text;
      if (m.final) {
        partialLine.className = "spoken";
        partialLine = null;
      }
    },
    assistant_text(m) {
      reply().querySelector(".text").textContent += m.delta;
    },
    tool_call_started(m) {
      startTool(m.call_id, m.name);
    },
    tool_call_finished(m) {
      const entry = toolItems.get(m.call_id) || startTool(m.call_id, m.name);
      const { item } = entry;
      item.dataset.status = m.status;
      item.querySelector(".tool-status").textContent = m.status;
      item.querySelector(".tool-duration").textContent = formatMs(Number(m.duration_ms) || 0);
      toolItems.delete(m.call_id);
      if (!toolItems.size) clearInterval(toolClock);
    },
    stage_changed(m) {
      ui.stage.textContent = m.to_stage;
      ui.stage.classList.remove("flash");
      void ui.stage.offsetWidth; // restart the highlight animation
      ui.stage.classList.add("flash");
      note(ui.assistant, `Stage: ${m.from_stage} → ${m.to_stage}`);
    },
    agent_speech_started() {
      ui.agentActivity.hidden = false;
    },
    agent_speech_ended(m) {
      ui.agentActivity.hidden = true;
      if (m.interrupted && currentReply) currentReply.dataset.heard = m.heard_text;
    },
    barge_in(m) {
      ui.agentActivity.hidden = true;
      const target = currentReply || ui.assistant.querySelector(".reply:last-of-type");
      if (target) {
        target.classList.add("interrupted");
        const badge = document.createElement("span");
        badge.className = "badge barge-in";
        badge.textContent = "interrupted";
        badge.title = m.heard_text ? `You heard: “${m.heard_text}”` : "Cut before it spoke";
        target.querySelector(".meta").append(badge);
      } else {
        note(ui.assistant, "You interrupted the agent.");
      }
    },
    turn_completed(m) {
      const item = currentReply;
      currentReply = null;
      if (!item) return;
      if (!item.querySelector(".text").textContent && m.text) {
        item.querySelector(".text").textContent = m.text;
      }
      item.classList.remove("streaming");
      item.dataset.stopReason = m.stop_reason;
    },
    error(m) {
      showError(m.code, m.message);
      if (call && FINAL_ERRORS.has(m.code)) call.finalError = m.code;
    },
    pong(m) {
      if (call && call.pings.has(m.id)) {
        counters.rttMs = performance.now() - call.pings.get(m.id);
        call.pings.delete(m.id);
        ui.status.title = `Round trip ${counters.rttMs.toFixed(1)} ms`;
      }
    },
  };

  function reply() {
    if (!currentReply) {
      currentReply = document.createElement("li");
      currentReply.className = "reply streaming";
      const meta = document.createElement("span");
      meta.className = "meta";
      const text = document.createElement("span");
      text.className = "text";
      currentReply.append(meta, text);
      ui.assistant.append(currentReply);
    }
    ui.assistant.scrollTop = ui.assistant.scrollHeight;
    return currentReply;
  }

  function startTool(callId, name) {
    const item = document.createElement("li");
    item.className = "tool";
    item.dataset.callId = callId;
    item.dataset.status = "running";
    const title = document.createElement("span");
    title.className = "tool-name";
    title.textContent = name;
    const status = document.createElement("span");
    status.className = "tool-status";
    status.textContent = "running";
    const duration = document.createElement("span");
    duration.className = "tool-duration";
    item.append(title, status, duration);
    ui.tools.append(item);
    ui.tools.scrollTop = ui.tools.scrollHeight;
    const entry = { item, started: performance.now() };
    toolItems.set(callId, entry);
    if (toolItems.size === 1) toolClock = setInterval(tickTools, TOOL_CLOCK_MS);
    return entry;
  }

  // Running calls show how long they have run so far; `tool_call_finished` puts the server's
  // own measure in its place.
  function tickTools() {
    const now = performance.now();
    for (const { item, started } of toolItems.values()) {
      item.querySelector(".tool-duration").textContent = `${formatMs(now - started)} so far`;
    }
  }

  // --- connecting -------------------------------------------------------------------------

  async function openMic() {
    if (mic && mic.getAudioTracks().some((t) => t.readyState === "live")) return mic;
    try {
      mic = await navigator.mediaDevices.getUserMedia(MIC_CONSTRAINTS);
      ui.micState.textContent = "Microphone on: just talk";
      counters.micEnabled = true;
    } catch (error) {
      // Go on without it: the agent still talks, and the user can type.
      mic = null;
      counters.micEnabled = false;
      const code = error && error.name === "NotFoundError" ? "mic_missing" : "mic_refused";
      showError(code);
      ui.micState.textContent = "Microphone off: type below";
    }
    return mic;
  }

  function send(message) {
    // Client messages may go on either channel; the data channel is the faster path.
    const text = JSON.stringify(message);
    if (call && call.dc && call.dc.readyState === "open" && message.type !== "end") {
      call.dc.send(text);
    } else if (call && call.ws.readyState === WebSocket.OPEN) {
      call.ws.send(text);
    }
  }

  async function connect({ resume = null, automatic = false } = {}) {
    if (call) return;
    clearTimeout(resumeTimer);
    const attempt = ++attempts;
    if (!automatic) clearError();
    setStatus(automatic ? "reconnecting" : "connecting", automatic ? "Reconnecting…" : "Connecting…");
    const stream = await openMic();
    if (attempt !== attempts) return; // hung up while the browser asked for the microphone
    const ws = new WebSocket(`${location.origin.replace(/^http/, "ws")}/ws`);
    const pc = new RTCPeerConnection({ iceServers: [] });
    // The channel must exist before the offer: an SDP answer cannot add one.
    const dc = pc.createDataChannel("events");
    const current = {
      ws, pc, dc, resume, automatic, admitted: false, finalError: null, begun: performance.now(),
      offerSent: false, pendingIce: [], pings: new Map(), timers: [],
    };
    call = current;

    if (stream) {
      for (const track of stream.getAudioTracks()) pc.addTrack(track, stream);
    } else {
      pc.addTransceiver("audio", { direction: "recvonly" }); // hear the agent, type to it
    }
    pc.ontrack = (event) => {
      ui.audio.srcObject = event.streams[0] || new MediaStream([event.track]);
      ui.audio.play().catch(() => {}); // autoplay may wait for a click; the element retries
    };
    pc.onicecandidate = (event) => {
      const message = { type: "ice", candidate: event.candidate ? event.candidate.toJSON() : null };
      counters.iceSent += 1;
      if (current.offerSent) sendOn(current, message);
      else current.pendingIce.push(message); // candidates go after the offer, never before
    };
    pc.onconnectionstatechange = () => {
      if (call !== current) return;
      if (pc.connectionState === "connected") {
        counters.connectMs = performance.now() - current.begun; // Connect to media flowing
        setStatus("connected", current.resume ? "Connected (resumed)" : "Connected");
      } else if (pc.connectionState === "failed") {
        lost(current);
      }
    };
    dc.onopen = () => {
      if (call !== current) return;
      counters.dataChannelOpen = true;
      ping(current);
      current.timers.push(setInterval(() => ping(current), PING_INTERVAL_MS));
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
      hangUp({ notify: true });
      giveUp("bad_offer", "Not connected");
      return;
    }
    const sendOffer = () => {
      if (call !== current) return;
      if (resume) {
        sendOn(current, { type: "resume", session_id: resume.session_id, token: resume.resume_token, protocol: PROTOCOL });
      }
      sendOn(current, { type: "offer", sdp: pc.localDescription.sdp, protocol: PROTOCOL });
      current.offerSent = true;
      for (const message of current.pendingIce.splice(0)) sendOn(current, message);
    };
    if (ws.readyState === WebSocket.OPEN) sendOffer();
    else ws.addEventListener("open", sendOffer, { once: true });
  }

  function sendOn(current, message) {
    if (current.ws.readyState === WebSocket.OPEN) current.ws.send(JSON.stringify(message));
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
    // The server stops a vanished or ended session's tools; their results never reach us.
    for (const { item } of toolItems.values()) {
      item.dataset.status = "aborted";
      item.querySelector(".tool-status").textContent = "aborted";
      item.querySelector(".tool-duration").textContent = "stopped: the connection closed";
    }
    toolItems.clear();
    clearInterval(toolClock);
    ui.userActivity.hidden = true;
    ui.agentActivity.hidden = true;
    currentReply = null;
    partialLine = null;
  }

  // The connection went away without our `end`: resume it if the server lets us.
  function lost(current) {
    if (call !== current) return;
    call = null;
    teardown(current);
    setReady(false);
    const code = current.finalError;
    if (code === "resume_refused") {
      forgetSession();
      if (!current.automatic) return connect(); // a stale saved session: start a new one
      return giveUp("connection_lost", "Disconnected");
    }
    if (code) {
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
    setStatus("reconnecting", "Connection lost: reconnecting…");
    const delay = RESUME_DELAYS_MS[resumeTry];
    resumeTry += 1;
    counters.resumes += 1;
    resumeTimer = setTimeout(() => connect({ resume: saved, automatic: true }), delay);
  }

  // No connection and none coming: say why, and let go of the microphone.
  function giveUp(code, statusText) {
    if (code) showError(code);
    releaseMic();
    setStatus("error", statusText);
  }

  function releaseMic() {
    if (!mic) return;
    for (const track of mic.getTracks()) track.stop();
    mic = null;
    counters.micEnabled = false;
    ui.micState.textContent = "Microphone off";
  }

  function hangUp({ notify = true } = {}) {
    clearTimeout(resumeTimer);
    attempts += 1;
    const current = call;
    call = null;
    if (current) {
      if (notify) sendOn(current, { type: "end" });
      teardown(current);
    }
    if (notify) forgetSession(); // `end` makes the session final: nothing to resume
    releaseMic();
    setReady(false);
    setStatus("ended", "Call ended");
  }

  // --- the controls -------------------------------------------------------------------------

  ui.connect.addEventListener("click", () => {
    resumeTry = 0;
    const saved = savedSession(); // a reload, or an idle close: take the conversation back
    connect({ resume: saved }).catch((error) => {
      console.error("llmrtc: connect failed", error);
      showError("connection_lost");
      setStatus("error", "Could not connect");
    });
  });
  ui.hangup.addEventListener("click", () => hangUp({ notify: true }));
  ui.interrupt.addEventListener("click", () => send({ type: "interrupt" }));
  ui.form.addEventListener("submit", (event) => {
    event.preventDefault();
    const text = ui.input.value.trim();
    if (!text || !call) return;
    send({ type: "text", text });
    addLine(ui.transcript, text, "typed");
    ui.input.value = "";
    ui.input.focus();
  });

  window.llmrtc = Object.assign(counters, {
    connect: () => ui.connect.click(),
    hangUp: () => hangUp({ notify: true }),
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
})();
