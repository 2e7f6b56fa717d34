// The live desk: apply the server's snapshot, then sequenced events; replay
// whatever a reconnect or a dropped push may have cost us.
(function () {
  "use strict";
  const list = document.getElementById("approvals");
  const template = document.getElementById("card-template");
  const live = document.getElementById("live");
  const empty = document.getElementById("empty");
  const count = document.getElementById("count");
  let lastSeq = Number(list.dataset.seq || 0);
  let socket = null;
  let retryMs = 500;

  function setLive(state, text) {
    live.dataset.state = state;
    live.textContent = text;
  }

  function refreshCount() {
    const n = list.querySelectorAll("li.card").length;
    count.textContent = String(n);
    empty.hidden = n > 0;
  }

  function reviewerText(reviewer) {
    return reviewer && reviewer.users && reviewer.users.length ? reviewer.users.join(", ") : "any reviewer";
  }

  function card(approval) {
    const node = template.content.firstElementChild.cloneNode(true);
    node.dataset.approvalId = approval.id;
    node.querySelector(".tool").textContent = approval.tool;
    node.querySelector(".args").textContent = JSON.stringify(approval.arguments, null, 2);
    const run = node.querySelector("a.run");
    run.href = "/runs/" + approval.run + "/";
    run.textContent = approval.run;
    node.querySelector(".reviewer").textContent = reviewerText(approval.reviewer);
    const expires = node.querySelector(".expires");
    expires.dateTime = approval.expires_at;
    expires.textContent = approval.expires_at;
    node.querySelector(".sha").textContent = approval.arguments_sha256;
    node.querySelector("a.details").href = "/approvals/" + approval.id + "/";
    // One card template, two kinds: keep the form that answers this request.
    const reconcile = approval.kind === "reconcile";
    node.classList.toggle("reconcile", reconcile);
    node.querySelectorAll(reconcile ? ".tool-call" : ".reconcile").forEach((el) => el.remove());
    const form = node.querySelector("form");
    form.action = "/approvals/" + approval.id + "/";
    form.querySelector("[name=checkpoint_id]").value = approval.checkpoint_id;
    return node;
  }

  function upsert(approval) {
    const existing = list.querySelector('[data-approval-id="' + approval.id + '"]');
    if (approval.status !== "pending") {
      if (existing) existing.remove();
    } else if (existing) {
      existing.replaceWith(card(approval));
    } else {
      list.appendChild(card(approval));
    }
    refreshCount();
  }

  function replaceAll(approvals) {
    list.querySelectorAll("li.card").forEach((node) => node.remove());
    approvals.forEach(upsert);
    refreshCount();
  }

  // lastSeq: every event up to it that we may see has been applied (or is in the
  // snapshot). Sequence numbers are global, so a jump may only be someone else's
  // events; we ask for a replay anyway and let replay.done say what it covered.
  let replaying = false; // at most one replay in flight
  let applied = new Map(); // approval id -> seq of the event last applied to its card

  function replay() {
    if (replaying || !socket || socket.readyState !== WebSocket.OPEN) return;
    replaying = true;
    socket.send(JSON.stringify({ type: "replay", after: lastSeq }));
  }

  function noteSeq(seq) {
    if (replaying) return; // replay.done will say how far we are
    if (seq === lastSeq + 1) lastSeq = seq;
    else if (seq > lastSeq + 1) replay(); // a gap: maybe lost, maybe not ours; ask
  }

  function applyApproval(message) {
    // Pushed and replayed copies may both arrive, and out of order: keep the newest.
    const id = message.data.id;
    if ((applied.get(id) || 0) >= message.seq) return;
    applied.set(id, message.seq);
    upsert(message.data);
  }

  function handle(message) {
    switch (message.type) {
      case "snapshot":
        replaceAll(message.data.approvals);
        applied = new Map();
        if (message.seq < lastSeq) lastSeq = message.seq;
        replaying = false;
        replay(); // anything between the page render and this socket
        return;
      case "heartbeat":
        if (message.seq > lastSeq) replay(); // the last push was lost, or was not ours
        return;
      case "replay.done":
        // The server says what it covered, so events we may not see stop looking like a gap.
        lastSeq = message.seq;
        replaying = false;
        if (message.data.more) replay(); // the page stopped short of the end
        return;
      case "error":
        replaying = false; // the server refused the request: do not wait for its answer
        return;
      case "approval.created":
      case "approval.updated":
        if (message.seq <= lastSeq) return; // already applied, or in the snapshot
        applyApproval(message);
        noteSeq(message.seq);
        return;
      default:
        if (message.seq > lastSeq) noteSeq(message.seq);
    }
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    socket = new WebSocket(scheme + location.host + "/ws/desk/");
    socket.onopen = () => {
      retryMs = 500;
      setLive("live", "live");
    };
    socket.onmessage = (event) => handle(JSON.parse(event.data));
    socket.onclose = (event) => {
      replaying = false; // its answer died with the socket
      if (event.code === 4403) {
        setLive("refused", "not allowed: log in as a reviewer");
        return;
      }
      setLive("reconnecting", "reconnecting…");
      setTimeout(connect, retryMs);
      retryMs = Math.min(retryMs * 2, 10000);
    };
  }

  refreshCount();
  connect();
})();
