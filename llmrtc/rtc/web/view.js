// What the page shows: status, stage, errors, the transcript, the agent's replies and the
// tool-call timeline. No networking here: app.js feeds it the server's messages.

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
  session_replaced: "This conversation continued in another tab or window.",
  // A reload found the server full: the conversation is kept (resume_ttl) for a later Connect.
  server_full_saved: "The server is busy: every session is taken. Your conversation is " +
    "saved: connect again in a minute to pick it up.",
};
// Errors about one turn (the session goes on): the next answered turn clears them.
const TURN_ERRORS = new Set(["model_error", "speech_error", "turn_error", "too_many_turns"]);
const TOOL_CLOCK_MS = 250; // how often a running tool call's elapsed time is redrawn

// Statuses of a call that was refused before its tool ran: no duration to show.
const NOT_RUN = new Set(["not_found", "invalid_arguments", "duplicate", "unavailable", "denied"]);
const MAX_ARGUMENTS_CHARS = 300; // an approval row shows this much of the call's arguments

// A call's (masked) arguments on one line, as `key: value, ...`, cut at MAX_ARGUMENTS_CHARS.
function formatArguments(args) {
  const parts = Object.entries(args || {}).map(
    ([key, value]) => `${key}: ${typeof value === "string" ? value : JSON.stringify(value)}`,
  );
  const text = parts.join(", ") || "no arguments";
  return text.length > MAX_ARGUMENTS_CHARS ? `${text.slice(0, MAX_ARGUMENTS_CHARS)}…` : text;
}

// The server sends milliseconds to the microsecond; the timeline shows a tenth of one, and
// below that "<0.1 ms" (a sync lookup takes ~20 µs: it ran, so never "0.0 ms").
function formatMs(ms) {
  if (ms >= 1000) return `${(ms / 1000).toFixed(2)} s`;
  return ms < 0.1 ? "<0.1 ms" : `${ms.toFixed(1)} ms`;
}

// A finished call's duration, or "did not run" for a call refused before it ran; a call
// restored from the agent's history has a status but no duration (the agent keeps none).
function formatDuration(status, ms) {
  if (NOT_RUN.has(status)) return "did not run";
  return typeof ms === "number" ? formatMs(ms) : "";
}

// The page's elements and what is on them; `onState(state)` hears every status change.
export function createView(document, onState) {
  const $ = (id) => document.getElementById(id);
  const ui = {
    status: $("status"), stage: $("stage"), error: $("error"), connect: $("connect"),
    hangup: $("hangup"), transcript: $("transcript"), assistant: $("assistant"),
    tools: $("tool-calls"), form: $("text-form"), input: $("text-input"), send: $("send"),
    interrupt: $("interrupt"), audio: $("remote-audio"), micState: $("mic-state"),
    userActivity: $("user-activity"), agentActivity: $("agent-activity"),
  };
  let currentReply = null; // the <li> of the agent's reply in progress
  let lastReply = null; // the <li> of the agent's latest reply (a note may come after it)
  let spokenReply = null; // the <li> of the reply whose voice is playing (it may be complete)
  let partialLine = null; // the <li> of a transcript that is not final yet
  // call_id -> {item, started, approval}: the tool calls still running (or waiting for the
  // user's approval: `approval` set, no clock until it is answered)
  const running = new Map();
  let toolClock = null;

  function addLine(list, text, className) {
    const item = document.createElement("li");
    if (className) item.className = className;
    item.textContent = text;
    list.append(item);
    list.scrollTop = list.scrollHeight;
    return item;
  }

  function part(className, text = "") {
    const span = document.createElement("span");
    span.className = className;
    span.textContent = text;
    return span;
  }

  function replyItem(text = "") {
    const item = document.createElement("li");
    item.className = "reply";
    item.append(part("meta"), part("text", text));
    ui.assistant.append(item);
    ui.assistant.scrollTop = ui.assistant.scrollHeight;
    return item;
  }

  function reply() {
    if (!currentReply) {
      currentReply = replyItem();
      currentReply.classList.add("streaming");
      lastReply = currentReply;
    }
    ui.assistant.scrollTop = ui.assistant.scrollHeight;
    return currentReply;
  }

  // Mark a reply cut short, once: `title` says what the user heard of it.
  function markInterrupted(item, title) {
    item.classList.remove("streaming");
    if (item.classList.contains("interrupted")) return;
    item.classList.add("interrupted");
    const badge = part("badge barge-in", "interrupted");
    badge.title = title;
    item.querySelector(".meta").append(badge);
  }

  function heardTitle(heardText) {
    return heardText ? `You heard: “${heardText}”` : "Cut before it spoke";
  }

  // A barge-in: the agent keeps what was heard, so the page shows that plainly and the rest
  // that streamed (never heard) dimmed beside it, as the restored reply will read.
  function splitHeard(item, heardText) {
    const text = item.querySelector(".text");
    const full = text.textContent + (item.querySelector(".unheard")?.textContent || "");
    const heard = heardText.trim();
    let cut = -1;
    if (!heard) cut = 0;
    else if (full.startsWith(heardText)) cut = heardText.length;
    else if (full.trimStart().startsWith(heard)) {
      cut = full.length - full.trimStart().length + heard.length;
    }
    if (cut < 0) return; // not a prefix of what streamed: leave the text as it is
    text.textContent = full.slice(0, cut);
    let tail = item.querySelector(".unheard");
    if (!tail) {
      tail = part("unheard");
      tail.title = "Not heard: the agent does not keep this part";
      text.after(tail);
    }
    tail.textContent = full.slice(cut);
  }

  function toolItem(name, status) {
    const item = document.createElement("li");
    item.className = "tool";
    item.dataset.status = status;
    item.append(part("tool-name", name), part("tool-status", status), part("tool-duration"));
    ui.tools.append(item);
    ui.tools.scrollTop = ui.tools.scrollHeight;
    return item;
  }

  // Running calls show how long they have run so far; `tool_call_finished` puts the server's
  // own measure in its place.
  function tickTools() {
    const now = performance.now();
    for (const { item, started, awaiting } of running.values()) {
      if (awaiting) continue; // its tool has not started: there is no time to show
      item.querySelector(".tool-duration").textContent = `${formatMs(now - started)} so far`;
    }
  }

  // A background call (its turn does not wait for it) says so in words beside a spinner (the
  // spinner is decoration: the status and the progress line carry the meaning).
  function startTool(callId, name, background = false) {
    const item = toolItem(name, "running");
    item.dataset.callId = callId;
    if (background) {
      item.dataset.background = "true";
      const spinner = part("tool-spinner");
      spinner.setAttribute("aria-hidden", "true");
      const head = part("tool-head");
      item.querySelector(".tool-name").replaceWith(head);
      head.append(spinner, part("tool-name", name), part("badge tool-background", "background"));
    }
    const entry = { item, started: performance.now() };
    running.set(callId, entry);
    if (running.size === 1) toolClock = setInterval(tickTools, TOOL_CLOCK_MS);
    return entry;
  }

  // A running call's latest progress line, under its name (one line: the newest replaces it).
  function showProgress(item, message) {
    let line = item.querySelector(".tool-progress");
    if (!line) {
      line = part("tool-progress");
      item.querySelector(".tool-duration").before(line);
    }
    line.textContent = message;
  }

  // The call ended: the row shows its final status as any finished call's does.
  function endTool(item, status, duration) {
    item.dataset.status = status;
    item.querySelector(".tool-status").textContent = status;
    item.querySelector(".tool-duration").textContent = duration;
    item.querySelector(".tool-spinner")?.remove();
    item.querySelector(".tool-progress")?.remove();
    item.querySelector(".tool-choices")?.remove();
  }

  function choiceButton(label, testId, className) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = `button ${className}`;
    button.dataset.testid = testId;
    button.textContent = label;
    return button;
  }

  // A call that needs the user's yes: its row (drawn by `tool_call_started` or here, whichever
  // came first) shows the arguments and Approve / Deny. One click answers: both buttons are
  // disabled, and `tool_call_finished` later puts the final status in place.
  function askApproval(callId, name, args, answer) {
    let entry = running.get(callId);
    if (!entry) entry = startTool(callId, name);
    const { item } = entry;
    entry.approval = true;
    entry.awaiting = true;
    item.dataset.status = "approval";
    item.querySelector(".tool-status").textContent = "approve?";
    item.querySelector(".tool-duration").textContent = "waiting for your approval";
    item.querySelector(".tool-arguments")?.remove();
    item.querySelector(".tool-choices")?.remove();
    const shown = part("tool-arguments", formatArguments(args));
    const choices = part("tool-choices");
    const approve = choiceButton("Approve", "approve", "primary");
    const deny = choiceButton("Deny", "deny", "danger");
    choices.append(approve, deny);
    item.querySelector(".tool-duration").before(shown, choices);
    const choose = (approved) => {
      if (approve.disabled) return;
      approve.disabled = true;
      deny.disabled = true;
      item.dataset.answer = approved ? "approved" : "denied";
      entry.awaiting = false;
      entry.started = performance.now();
      item.dataset.status = approved ? "running" : "denied";
      item.querySelector(".tool-status").textContent = approved ? "running" : "denied";
      item.querySelector(".tool-duration").textContent = "";
      answer(approved);
    };
    approve.addEventListener("click", () => choose(true));
    deny.addEventListener("click", () => choose(false));
    ui.tools.scrollTop = ui.tools.scrollHeight;
  }

  return {
    ui,

    setStatus(state, text) {
      ui.status.dataset.state = state;
      ui.status.textContent = text;
      const live = state === "connecting" || state === "connected" || state === "reconnecting";
      ui.connect.disabled = live;
      ui.hangup.disabled = !live;
      onState(state);
    },

    statusText() {
      return ui.status.textContent;
    },

    setRoundTrip(ms) {
      ui.status.title = `Round trip ${ms.toFixed(1)} ms`;
    },

    setReady(ready) {
      ui.input.disabled = !ready;
      ui.send.disabled = !ready;
      ui.interrupt.disabled = !ready;
    },

    setMic(text) {
      ui.micState.textContent = text;
    },

    showError(code, message) {
      ui.error.dataset.code = code;
      ui.error.textContent = ERROR_TEXT[code] || message || `Error: ${code}`;
      ui.error.hidden = false;
    },

    clearError() {
      ui.error.hidden = true;
      ui.error.textContent = "";
      delete ui.error.dataset.code;
    },

    // A turn answered: an error about an earlier turn no longer holds.
    clearTurnError() {
      if (TURN_ERRORS.has(ui.error.dataset.code)) this.clearError();
    },

    note(text) {
      addLine(ui.assistant, text, "note");
    },

    typed(text) {
      addLine(ui.transcript, text, "typed");
    },

    transcript(text, final) {
      if (!text) {
        if (partialLine && final) partialLine.remove();
        if (final) partialLine = null;
        return;
      }
      if (!partialLine) partialLine = addLine(ui.transcript, "", "partial");
      partialLine.textContent = text;
      if (final) {
        partialLine.className = "spoken";
        partialLine = null;
      }
    },

    userSpeaking(speaking) {
      ui.userActivity.hidden = !speaking;
    },

    agentSpeaking(speaking) {
      ui.agentActivity.hidden = !speaking;
      if (speaking) spokenReply = currentReply || lastReply;
    },

    assistantDelta(delta) {
      const item = reply();
      // After a barge-in, what still streams in was never heard either.
      const tail = item.querySelector(".unheard");
      (tail || item.querySelector(".text")).textContent += delta;
    },

    turnCompleted(text, stopReason) {
      const item = currentReply;
      currentReply = null;
      if (!item) return;
      // Only a turn whose text never streamed shows it here. One cut before its first word
      // was heard has it all dimmed in `.unheard` and an empty `.text`: filling that again
      // showed the reply twice ("SureSure").
      const streamed = item.querySelector(".text").textContent ||
        item.querySelector(".unheard")?.textContent;
      if (!streamed && text) {
        item.querySelector(".text").textContent = text;
      }
      item.classList.remove("streaming");
      item.dataset.stopReason = stopReason;
    },

    agentSpeechEnded() {
      ui.agentActivity.hidden = true;
      spokenReply = null;
    },

    // Speech (or text) over the agent: a real barge-in cuts the reply; a false one (a cough)
    // or a backchannel ("uh-huh") let it go on, and the page says so.
    interruption(kind, heardText) {
      if (kind === "false" || kind === "backchannel") {
        const note = kind === "false"
          ? "A noise paused the agent; it went on."
          : "You said “uh-huh” or the like; the agent went on.";
        addLine(ui.assistant, note, "note").dataset.interruption = kind;
        return;
      }
      this.bargeIn(heardText);
    },

    bargeIn(heardText) {
      ui.agentActivity.hidden = true;
      const target = currentReply || spokenReply || lastReply;
      if (!target) {
        addLine(ui.assistant, "You interrupted the agent.", "note");
        return;
      }
      markInterrupted(target, heardTitle(heardText));
      splitHeard(target, heardText || "");
    },

    // The user hung up or the connection dropped: the reply still streaming or still being
    // spoken was cut there (the agent keeps it as interrupted too).
    replyCut(why) {
      const target = currentReply || spokenReply;
      if (target) markInterrupted(target, why);
    },

    // A `session` message: the page shows exactly the conversation the agent remembers, so a
    // new session starts empty and a resumed one shows what was restored, its tool calls too
    // (stage notes are not part of it).
    showConversation(history) {
      for (const { item } of running.values()) item.remove();
      running.clear();
      clearInterval(toolClock);
      ui.transcript.replaceChildren();
      ui.assistant.replaceChildren();
      ui.tools.replaceChildren();
      currentReply = null;
      lastReply = null;
      spokenReply = null;
      partialLine = null;
      for (const entry of history || []) {
        if (entry.role === "user") {
          addLine(ui.transcript, entry.text, "restored");
        } else if (entry.role === "assistant") {
          const item = replyItem(entry.text);
          item.classList.add("restored");
          if (entry.interrupted) markInterrupted(item, heardTitle(entry.text));
          lastReply = item;
        } else if (entry.role === "tool") {
          const item = toolItem(entry.name, entry.status);
          item.classList.add("restored");
          item.querySelector(".tool-duration").textContent = formatDuration(entry.status);
        }
      }
    },

    stage(stage, from = null) {
      ui.stage.textContent = stage;
      if (from === null) return;
      ui.stage.classList.remove("flash");
      void ui.stage.offsetWidth; // restart the highlight animation
      ui.stage.classList.add("flash");
      addLine(ui.assistant, `Stage: ${from} → ${stage}`, "note");
    },

    toolStarted(callId, name, background = false) {
      if (running.get(callId)?.approval) return; // its approval request drew the row already
      startTool(callId, name, background);
    },

    // `approval_requested`: `answer(approved)` sends the user's `approve`.
    approvalRequested(callId, name, args, answer) {
      askApproval(callId, name, args, answer);
    },

    // Progress of a call that is no longer running (or never showed) is not drawn.
    toolProgress(callId, message) {
      const entry = running.get(callId);
      if (entry && message) showProgress(entry.item, message);
    },

    toolFinished(callId, name, status, durationMs, reusedFrom = null) {
      const { item } = running.get(callId) || startTool(callId, name);
      // A repeat answered with an earlier call's result did not run: say whose it is.
      const duration = reusedFrom
        ? `reused ${reusedFrom}`
        : formatDuration(status, Number(durationMs) || 0);
      endTool(item, status, duration);
      running.delete(callId);
      if (!running.size) clearInterval(toolClock);
    },

    // The connection closed: the server stops a vanished or ended session's tools, and their
    // results never reach this page. A background call is not stopped by a lost connection
    // (`ended` false: its result goes to the agent, and a resume draws the conversation
    // again): this page just will not hear how it ends. A hang-up (`ended`) stops it too.
    connectionClosed(ended = false) {
      for (const { item, awaiting } of running.values()) {
        if (awaiting) {
          // The server denies a call still waiting for approval when its session ends.
          endTool(item, "denied", "not approved: the connection closed");
        } else if (item.dataset.background && !ended) {
          endTool(item, "unknown", "the connection closed before its result");
        } else {
          endTool(item, "aborted", "stopped: the connection closed");
        }
      }
      running.clear();
      clearInterval(toolClock);
      ui.userActivity.hidden = true;
      ui.agentActivity.hidden = true;
      currentReply = null;
      spokenReply = null;
      partialLine = null;
    },

    playRemote(stream) {
      ui.audio.srcObject = stream;
      ui.audio.play().catch(() => {}); // autoplay may wait for a click; the element retries
    },
  };
}
