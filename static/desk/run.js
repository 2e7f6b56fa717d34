// The run page's timeline, live: the desk socket says when the run (run.updated) or one of its
// approvals (approval.*) changed; the page then fetches itself and swaps in the new timeline,
// status and controls. A heartbeat past the last event seen may hide a lost push: that reloads too.
(function () {
  "use strict";
  const section = document.getElementById("timeline");
  if (!section || !("WebSocket" in window)) return;
  const runId = section.dataset.runId;
  const live = document.getElementById("timeline-live");
  let lastSeq = 0;
  let retryMs = 500;
  let pending = null;
  let stale = false; // something changed while a fetch was in flight: fetch again after it

  function reload() {
    if (pending) {
      // The fetch in flight may have left before this change committed: never drop it.
      stale = true;
      return;
    }
    stale = false;
    pending = fetch(location.href, { headers: { Accept: "text/html" }, credentials: "same-origin" })
      .then((response) => (response.ok ? response.text() : Promise.reject(response.status)))
      .then((html) => {
        const fresh = new DOMParser().parseFromString(html, "text/html");
        // The controls with the status: an ended run offers no Cancel (and a failed one, Retry).
        // The title holds the status and the count of failed calls; the worker's steps' count
        // sits by the checkbox that shows them (left as the reviewer set it).
        for (const id of ["timeline-list", "run-title", "worker-steps", "side-effects", "run-controls"]) {
          const now = document.getElementById(id);
          const next = fresh.getElementById(id);
          if (!now || !next) continue;
          const swapped = document.importNode(next, true);
          if (id === "run-controls" && buttonIds(now) !== buttonIds(swapped)) holdNewButtons(swapped);
          now.replaceWith(swapped);
        }
      })
      .catch(() => {})
      .finally(() => {
        pending = null;
        if (stale) reload();
      });
  }

  function buttonIds(controls) {
    return Array.from(controls.querySelectorAll("button"), (button) => button.id).join(" ");
  }

  // A control that appears where another was (Retry where Cancel was, as a run fails) takes
  // no click for a moment: a click meant for the old one must not land on the new one.
  const HOLD_MS = 1000;
  function holdNewButtons(controls) {
    const buttons = controls.querySelectorAll("button");
    buttons.forEach((button) => (button.disabled = true));
    setTimeout(() => buttons.forEach((button) => (button.disabled = false)), HOLD_MS);
  }

  function ours(message) {
    const data = message.data || {};
    if (message.type === "run.updated") return data.id === runId;
    if (message.type === "approval.created" || message.type === "approval.updated") return data.run === runId;
    return false;
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const socket = new WebSocket(scheme + location.host + section.dataset.socketPath);
    socket.onopen = () => {
      retryMs = 500;
      live.textContent = "live";
      live.dataset.state = "live";
    };
    socket.onmessage = (event) => {
      const message = JSON.parse(event.data);
      if (message.type === "snapshot") {
        lastSeq = message.seq;
        reload(); // whatever happened before this socket opened
      } else if (message.type === "heartbeat") {
        if (message.seq > lastSeq) reload();
        lastSeq = Math.max(lastSeq, message.seq);
      } else if (typeof message.seq === "number") {
        lastSeq = Math.max(lastSeq, message.seq);
        if (ours(message)) {
          // Counted, so that a test can tell an event's refresh from a heartbeat's.
          section.dataset.eventRefreshes = String(Number(section.dataset.eventRefreshes || 0) + 1);
          reload();
        }
      }
    };
    socket.onclose = (event) => {
      live.dataset.state = "";
      if (event.code === 4403) {
        live.textContent = ""; // not a reviewer: the page stays as loaded
        return;
      }
      live.textContent = "reconnecting…";
      setTimeout(connect, retryMs);
      retryMs = Math.min(retryMs * 2, 10000);
    };
  }

  connect();
})();
