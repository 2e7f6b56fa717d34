// The live desk: a queue of pending approvals, one page of it, kept current by the socket.
// Apply the server's snapshot, then sequenced events; replay whatever a reconnect or a
// dropped push may have cost us. Keeps the count, the page's bounds, the notices of colleagues'
// decisions and the keys' hold. The desk page's entry point: it holds the queue's state and wires
// the parts that share it: desk_card.js draws a card, desk_keys.js selects and reads the keys,
// desk_decide.js decides in place (the mouse or the keyboard).
(function () {
  "use strict";
  const list = document.getElementById("approvals");
  const live = document.getElementById("live");
  const empty = document.getElementById("empty");
  const count = document.getElementById("count");
  const notices = document.getElementById("notices");
  const { visible } = window.DeskShown;
  const { card, carryOver, refocus, arm, readCard, knowAsking } = window.DeskCard;
  const me = list.dataset.username;
  const latest = new Map(); // approval id -> its payload as last drawn (readSummary adds the preview)
  const pageSize = Number(list.dataset.pageSize || 50);
  const pageOffset = Number(list.dataset.offset || 0);
  let hasNext = list.dataset.hasNext === "yes";
  let lastSeq = Number(list.dataset.seq || 0);
  let socket = null;
  let retryMs = 500;
  // The count in the heading and tab: every approval pending for me (all pages, filters aside).
  // The page's and then the snapshot's total; events after the snapshot move it, once per change.
  let total = Number(list.dataset.total || 0);
  // Past the server's count cap the count is a lower bound ("1000+"); events still move it.
  let totalCapped = list.dataset.totalCapped === "yes";
  let snapshotSeq = null; // the snapshot's seq once it arrived: older events are in its total
  const counted = new Map(); // approval id -> pending?, as the count last saw it
  const offPage = new Map(); // pending and matching, but on another page: id -> "next" | "earlier"
  const leftOnSnapshot = new Set(); // cards the snapshot dropped: decided, or moved to another page
  const decidedHere = new Set(); // ids this page decided: no "decided by" notice for those

  function setLive(state, text) {
    live.dataset.state = state;
    live.textContent = text;
  }

  function cards() {
    return [...list.querySelectorAll("li.card")];
  }

  function refreshCount() {
    const n = Math.max(0, total) + (totalCapped ? "+" : "");
    count.textContent = n;
    document.title = document.title.replace(/^(\(\d+\+?\) )?/, "(" + n + ") ");
    empty.hidden = cards().length > 0;
  }

  function notice(text, kind) {
    const p = document.createElement("p");
    p.className = "flash " + (kind || "info");
    p.textContent = text;
    notices.prepend(p);
    while (notices.children.length > 3) notices.lastElementChild.remove();
    setTimeout(() => p.remove(), NOTICE_MS); // they float over the queue: they must not pile up
  }
  const NOTICE_MS = 15000;

  // Deciding (desk_decide.js) and the keys (desk_keys.js) act on this queue, through what it hands them.
  const { decideWithCare, decide, post, facts, parsed } = window.DeskDecide.wire({ list, notice, decidedHere, settle });
  const { selected, select, move, listHasFocus, typing } = window.DeskKeys.wire({ list, cards, notice, keysHeld, decideWithCare, decide });

  // A card a live event drew has no preview yet (events carry none): ask the server for the
  // desk's view of it, then draw it again. Until then it is "pending": `a` and `A` wait for it.
  async function readSummary(id) {
    const answer = await readCard(id);
    if (!answer) return;
    if (typeof answer.asking === "string") knowAsking(id, answer.asking);
    const node = list.querySelector('li.card[data-approval-id="' + id + '"]');
    const approval = latest.get(id);
    if (!node || !approval || node.dataset.summary !== "pending") return;
    upsertDrawn(node, { ...approval, desk: { ...(approval.desk || {}), summary: answer.desk.summary } });
  }

  // --- browser notifications: a new approval while this tab is in the background ------
  // Permission is asked only from the button's click (browsers refuse it otherwise).
  const notifyButton = document.getElementById("notify-permission");
  if (notifyButton && "Notification" in window && Notification.permission === "default") {
    notifyButton.hidden = false;
    notifyButton.addEventListener("click", () => {
      Notification.requestPermission().then(() => (notifyButton.hidden = true));
    });
  }
  function notifyInBackground(approval) {
    if (!document.hidden || !("Notification" in window) || Notification.permission !== "granted") return;
    const title = approval.kind === "question" ? "A question from " + approval.agent : approval.tool + " needs a decision";
    const shown = new Notification(title, { body: visible(approval.task || ""), tag: approval.id });
    shown.onclick = () => window.focus();
  }

  // --- the queue's order and filters: the server's ---------------------------------------
  // Each card carries its place in this reviewer's queue as the server computed it
  // (approvals/reads/queue.py queue_sort_key: tier, expiry, creation, id), and each event says
  // whether the call passes this page's filters (queue_matches): the page restates neither rule.
  function sortKey(d) {
    try {
      return JSON.parse(d.sortKey || "null") || [];
    } catch (error) {
      return [];
    }
  }

  function moved(from, to) {
    const a = sortKey(from.dataset);
    const b = sortKey(to.dataset);
    return before(a, b) || before(b, a);
  }

  function before(a, b) {
    for (let i = 0; i < Math.max(a.length, b.length); i++) {
      if (a[i] !== b[i]) return (a[i] || "") < (b[i] || "");
    }
    return false;
  }

  function matches(approval) {
    return !approval.desk || approval.desk.matches !== false;
  }

  // The page's bounds as the server drew them: a new approval joins this page only if it
  // sorts within them (earlier pages' items stay off a later page, later pages' off this one).
  let lowerBound = null;
  function drawBounds() {
    lowerBound = pageOffset === 0 || !cards().length ? null : sortKey(cards()[0].dataset);
  }

  // An approval that belongs on another page is counted there, never drawn here: the paging
  // line says how many arrived and links to them.
  function place(node) {
    const key = sortKey(node.dataset);
    const id = node.dataset.approvalId;
    if (lowerBound && before(key, lowerBound)) {
      offPage.set(id, "earlier");
      return false;
    }
    const all = cards();
    const next = all.find((c) => before(key, sortKey(c.dataset)));
    if (!next && (hasNext || all.length >= pageSize)) {
      offPage.set(id, "next"); // it belongs on a later page
      return false;
    }
    list.insertBefore(node, next || null);
    offPage.delete(id);
    if (cards().length > pageSize) {
      const last = cards().at(-1);
      offPage.set(last.dataset.approvalId, "next");
      last.remove();
    }
    return true;
  }

  const offPageLine = document.createElement("span");
  offPageLine.id = "off-page";
  offPageLine.hidden = true;
  document.getElementById("paging").append(offPageLine);

  function pageLink(offset, text) {
    const query = new URLSearchParams(location.search);
    query.set("offset", String(Math.max(0, offset)));
    const a = document.createElement("a");
    a.href = "?" + query.toString();
    a.textContent = text;
    return a;
  }

  function showOffPage() {
    const where = [...offPage.values()];
    const next = where.filter((w) => w === "next").length;
    const earlier = where.length - next;
    const links = [];
    if (next) links.push(pageLink(pageOffset + pageSize, next + " more — next page →"));
    if (earlier) links.push(pageLink(pageOffset - pageSize, "← " + earlier + " new on an earlier page"));
    offPageLine.replaceChildren(...links.flatMap((a, i) => (i ? [" · ", a] : [a])));
    offPageLine.hidden = !links.length;
  }

  // The count moves once per approval and change, for events newer than the snapshot.
  function recount(approval, type, seq) {
    if (snapshotSeq === null || seq <= snapshotSeq) return; // already in the total we have
    const now = shown(approval); // pending, and still mine to see
    if (now && !counted.has(approval.id) && type !== "approval.created" && retargeted(approval)) {
      // Not seen here, and its reviewers changed once (handed over, escalated): it may have
      // been mine all along (on another page, in the total) or have just become mine (not in
      // it). The event cannot say which; the server's count can.
      resync();
      return;
    }
    // One the count has not seen was pending at the snapshot, unless this event created it.
    const was = counted.has(approval.id) ? counted.get(approval.id) : type !== "approval.created";
    if (now !== was) total += now ? 1 : -1;
    counted.set(approval.id, now);
  }

  // Only a hand-over and an escalation change who a call names (approvals/lifecycle/handover.py, clock.py).
  function retargeted(approval) {
    return !!approval.handover || approval.escalation_level > 0;
  }

  // Keys typed for a field that vanished under them (its card decided by a colleague, or
  // dropped by a snapshot) are no commands for the card selected next: the `a` of "amount"
  // approved it, an `o` opened it. They stay off for KEYS_HELD_MS from the moment the field
  // went, said once on screen; a key pressed meanwhile does not extend it. The reviewer's own
  // decision never holds them: its card leaving is what they asked for.
  const KEYS_HELD_MS = 1000;
  let keysHeldUntil = 0;

  function typingIn(node) {
    return node.contains(document.activeElement) && !!typing(document.activeElement);
  }

  // True when it held them (and said so).
  function holdKeysIfTypingIn(node) {
    if (decidedHere.has(node.dataset.approvalId) || !typingIn(node)) return false;
    holdKeys(node.dataset.approvalId);
    return true;
  }

  function holdKeys(id, why) {
    keysHeldUntil = Date.now() + KEYS_HELD_MS;
    const approval = latest.get(id);
    const what = approval && !shown(approval) ? decidedText(approval) : "The call you were typing in left this page.";
    notice(what + " You were typing in it: keys pause for a second, so what you typed does not act on the next call." + (why ? " (" + why + ")" : ""), "info");
  }

  function keysHeld() {
    return Date.now() < keysHeldUntil;
  }

  function remove(node) {
    const wasSelected = node === selected();
    const index = cards().indexOf(node);
    node.remove();
    if (wasSelected) select(cards()[Math.min(index, cards().length - 1)], { focus: listHasFocus() });
  }

  function decidedText(approval) {
    const d = approval.decision;
    const what = approval.tool + " (run " + approval.run.slice(0, 8) + "…)";
    if (d) return what + ": " + d.verdict + " by " + d.reviewer + ".";
    const h = approval.handover;
    if (approval.status === list.dataset.shownStatus && h) return what + ": handed over by " + h.by + ".";
    return what + ": " + approval.status + ".";
  }

  // Pending and still mine to see: a hand-over elsewhere takes it off this desk (admins see all).
  function shown(approval) {
    if (approval.status !== list.dataset.shownStatus) return false;
    const targets = (approval.reviewer && approval.reviewer.targets) || [];
    const users = (approval.reviewer && approval.reviewer.users) || [];
    if (approval.quorum && approval.quorum.approved_by.includes(me)) return false; // my vote is in
    return !targets.length || users.includes(me) || list.dataset.admin === "yes";
  }

  // A card drawn again: in place, or where its new place in the server's order is.
  function upsertDrawn(existing, approval) {
    latest.set(approval.id, approval);
    const wasSelected = existing === selected();
    const focus = listHasFocus();
    const node = card(approval);
    const kept = carryOver(existing, node);
    if (!moved(existing, node)) existing.replaceWith(node);
    else {
      // Its place in the server's order changed (handed over to me by name, escalated to me):
      // it goes there, or to the page it now belongs on, as the server's page would draw it.
      const index = cards().indexOf(existing);
      const typingHere = existing.contains(document.activeElement) && typing(document.activeElement);
      existing.remove();
      if (!place(node)) {
        if (typingHere) holdKeys(approval.id, "moved to another page of the queue");
        if (wasSelected) select(cards()[Math.min(index, cards().length - 1)], { focus });
      }
    }
    if (node.isConnected) {
      if (wasSelected) select(node, { focus });
      refocus(kept);
      if (node.dataset.summary === "pending") readSummary(approval.id);
    }
  }

  function upsert(approval, type, seq) {
    const existing = list.querySelector('[data-approval-id="' + approval.id + '"]');
    if (existing) latest.set(approval.id, approval);
    recount(approval, type, seq);
    if (!shown(approval)) {
      offPage.delete(approval.id);
      const shownHere = existing || leftOnSnapshot.has(approval.id);
      const said = existing && holdKeysIfTypingIn(existing); // says who decided it, once
      if (shownHere && !said && !decidedHere.has(approval.id)) notice(decidedText(approval), "info");
      leftOnSnapshot.delete(approval.id);
      if (existing) remove(existing);
    } else if (existing && !matches(approval)) {
      // Still mine, but no longer this page's (on the "any reviewer" page, one handed over to a
      // group of mine): it leaves, as the server's page drops it, saying why.
      const said = holdKeysIfTypingIn(existing);
      if (!said && !decidedHere.has(approval.id)) notice(decidedText(approval), "info");
      remove(existing);
    } else if (existing) {
      upsertDrawn(existing, approval); // no preview in an event: read again (a vote changes what is unusual)
    } else if (matches(approval)) {
      // The keys act on the selected card: a queue that was empty has none until this one.
      const node = card(approval);
      latest.set(approval.id, approval);
      if (place(node) && !selected()) select(cards()[0], { focus: false });
      if (node.isConnected && node.dataset.summary === "pending") readSummary(approval.id);
    }
    showOffPage();
    refreshCount();
  }

  // The snapshot is this page of the queue as the server sees it now (the socket's URL
  // carries the page's filters and offset), with `total`, the count of all pending for me.
  // (An approval decided between the server reading the snapshot's seq and its rows is
  // counted off twice: rare, and the next snapshot sets the count right.)
  function applySnapshot(data, seq) {
    const approvals = data.approvals;
    total = typeof data.total === "number" ? data.total : approvals.length; // no total: all of them
    totalCapped = data.total_capped === true;
    if (typeof data.more === "boolean") hasNext = data.more;
    snapshotSeq = seq;
    counted.clear();
    approvals.forEach((a) => {
      latest.set(a.id, a);
      counted.set(a.id, true);
      offPage.delete(a.id);
    });
    // The window is this page, in the server's order: draw it as it is. Cards not in it leave;
    // one that left because it was decided gets its notice from the replay that follows (upsert).
    const inWindow = new Set(approvals.map((a) => a.id));
    const was = selected();
    const wasIndex = cards().indexOf(was);
    const focus = !!was && listHasFocus();
    cards().forEach((node) => {
      if (!inWindow.has(node.dataset.approvalId)) leftOnSnapshot.add(node.dataset.approvalId);
    });
    const drawnBefore = new Map(cards().map((node) => [node.dataset.approvalId, node]));
    let kept = null;
    const drawn = approvals.map((a) => {
      const node = card(a);
      kept = carryOver(drawnBefore.get(a.id), node) || kept;
      return node;
    });
    if (!kept) cards().forEach(holdKeysIfTypingIn);
    list.replaceChildren(...drawn);
    drawBounds();
    const again = was && list.querySelector('[data-approval-id="' + was.dataset.approvalId + '"]');
    const all = cards();
    if (all.length) select(again || all[Math.min(Math.max(wasIndex, 0), all.length - 1)], { focus });
    refocus(kept);
    showOffPage();
    refreshCount();
    tick();
  }

  // A decided card leaves the page and the count (its approval.updated then finds it counted).
  function settle(node, { focus }) {
    const id = node.dataset.approvalId;
    if (snapshotSeq !== null && counted.get(id) !== false) {
      total -= 1;
      counted.set(id, false);
    }
    if (node.isConnected) {
      const index = cards().indexOf(node);
      const wasSelected = node === selected();
      node.remove();
      if (wasSelected || focus) select(cards()[Math.min(index, cards().length - 1)], { focus }); // focus stays in the queue
      if (focus && !cards().length) list.focus();
    }
    refreshCount();
  }

  // For batch.js (and edit.js): the queue's cards, the current one, and one decision at a time.
  window.DeskQueue = { cards, selected, notice, post, settle, keysHeld, facts, parsed, move, select, heldUntil: () => keysHeldUntil };

  // --- countdowns ---------------------------------------------------------------------
  function tick() {
    cards().forEach((node) => {
      window.DeskTime.show(node.querySelector(".countdown"), node.dataset.expires, "expires", true);
      const target = node.querySelector(".countdown.target");
      if (node.dataset.respondBy) window.DeskTime.show(target, node.dataset.respondBy, "target", true);
      else target.textContent = "";
    });
  }

  // --- the socket ---------------------------------------------------------------------
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

  // A fresh snapshot of this page and the count, when events cannot say what the count is.
  // At most one in flight; a socket not open gets one when it connects anyway.
  let resyncing = false;
  function resync() {
    if (resyncing || !socket || socket.readyState !== WebSocket.OPEN) return;
    resyncing = true;
    socket.send(JSON.stringify({ type: "snapshot" }));
  }

  // The socket sends this page approval events only (`events=approvals`) and says, as `after`,
  // that every event after `after` up to the message reached it: the ones it skipped are no gap.
  function covered(message) {
    return typeof message.after === "number" && message.after <= lastSeq;
  }

  function noteSeq(message) {
    if (replaying) return; // replay.done will say how far we are
    const seq = message.seq;
    if (seq === lastSeq + 1 || (seq > lastSeq && covered(message))) lastSeq = seq;
    else if (seq > lastSeq + 1) replay(); // a gap: maybe lost, maybe not ours; ask
  }

  function applyApproval(message) {
    // Pushed and replayed copies may both arrive, and out of order: keep the newest.
    const id = message.data.id;
    if ((applied.get(id) || 0) >= message.seq) return;
    applied.set(id, message.seq);
    if (snapshotSeq !== null && message.seq <= snapshotSeq) {
      sayWhyItLeft(message.data);
      return;
    }
    upsert(message.data, message.type, message.seq);
  }

  // An event up to the snapshot's seq is in the snapshot, which was read after it: drawn, it
  // brought back a card the snapshot left out for a reason no event tells (a group the reviewer
  // has left since) or an older state of one. It only says why a card the snapshot dropped left.
  function sayWhyItLeft(approval) {
    if (shown(approval) || !leftOnSnapshot.has(approval.id)) return;
    leftOnSnapshot.delete(approval.id);
    if (!decidedHere.has(approval.id)) notice(decidedText(approval), "info");
  }

  function handle(message) {
    switch (message.type) {
      case "snapshot":
        resyncing = false;
        applySnapshot(message.data, message.seq);
        list.dataset.synced = "1"; // from here on, every change reaches this page as an event
        applied = new Map();
        if (message.seq < lastSeq) lastSeq = message.seq;
        replaying = false;
        replay(); // anything between the page render and this socket
        return;
      case "heartbeat":
        if (message.seq <= lastSeq) return;
        if (!replaying && covered(message)) lastSeq = message.seq; // only skipped events since
        else replay(); // the last push was lost, or was not ours
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
        if (message.type === "approval.created") notifyInBackground(message.data);
        applyApproval(message);
        noteSeq(message);
        return;
      default:
        if (message.seq > lastSeq) noteSeq(message);
    }
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    // The page's query (filters, offset) names the window the snapshot holds; `events` says
    // this page applies approval events only (the socket skips the rest, and vouches for them).
    const query = new URLSearchParams(location.search);
    query.set("events", "approvals");
    socket = new WebSocket(scheme + location.host + list.dataset.socketPath + "?" + query.toString());
    socket.onopen = () => {
      retryMs = 500;
      setLive("live", "live");
    };
    socket.onmessage = (event) => handle(JSON.parse(event.data));
    socket.onclose = (event) => {
      replaying = resyncing = false; // their answers died with the socket
      if (event.code === 4403) {
        setLive("refused", "not allowed: log in as a reviewer");
        return;
      }
      setLive("reconnecting", "reconnecting…");
      setTimeout(connect, retryMs);
      retryMs = Math.min(retryMs * 2, 10000);
    };
  }

  cards().forEach(arm); // the server's cards: the submit handler (desk_decide.js) holds them now
  drawBounds();
  if (cards().length) select(cards()[0], { focus: false });
  refreshCount();
  tick();
  setInterval(tick, 1000);
  connect();
})();
