// The live desk: a queue of pending approvals, one page of it, kept current by the socket.
// Apply the server's snapshot, then sequenced events; replay whatever a reconnect or a
// dropped push may have cost us. Decide in place, from the mouse or the keyboard.
(function () {
  "use strict";
  const list = document.getElementById("approvals");
  const template = document.getElementById("card-template");
  const live = document.getElementById("live");
  const empty = document.getElementById("empty");
  const count = document.getElementById("count");
  const notices = document.getElementById("notices");
  const help = document.getElementById("keys-help");
  const { visible, exact, hasInvisible, shownJson } = window.DeskShown;
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

  // --- the card: templates/desk/_card.html rendered blank into #card-template -------------
  function urlFor(pattern, id) {
    return pattern.replace(template.dataset.placeholder, encodeURIComponent(id));
  }

  function asciiJson(value) {
    const text = JSON.stringify(value === undefined ? null : value, null, 2);
    return text.replace(/[\u0080-\uffff]/g, (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));
  }

  function card(approval) {
    const node = template.content.firstElementChild.cloneNode(true);
    const users = (approval.reviewer && approval.reviewer.users) || [];
    const desk = approval.desk || {};
    const summary = desk.summary; // undefined: not read yet (a live event); null: no preview kind
    Object.assign(node.dataset, {
      approvalId: approval.id,
      kind: approval.kind,
      effect: approval.effect || "",
      agent: approval.agent || "",
      tool: approval.tool,
      run: approval.run,
      expires: approval.expires_at,
      respondBy: approval.respond_by || "",
      created: approval.created_at || "",
      assignees: users.join(" "),
      targets: asciiJson((approval.reviewer && approval.reviewer.targets) || []),
      arguments: asciiJson(approval.arguments), // as the card's server-side ascii_json writes it
      sortKey: asciiJson(desk.sort_key || null),
      summary: summary === undefined ? "pending" : summary ? "ready" : "none",
      unusual: asciiJson(summary ? summary.unusual : ""),
      deviceKey: summary && summary.device_key ? "yes" : "",
    });
    node.querySelectorAll(".tool, .tool-name").forEach((el) => (el.textContent = approval.tool));
    node.querySelectorAll(".agent, .agent-name").forEach((el) => (el.textContent = approval.agent || ""));
    node.querySelector(".submitter").textContent = approval.submitted_by || "";
    node.querySelector(".task-text").textContent = visible(approval.task || "");
    node.querySelector(".args").textContent = shownJson(approval.arguments);
    const run = node.querySelector("a.run");
    run.href = urlFor(template.dataset.runUrl, approval.run);
    run.title = approval.run;
    run.textContent = "run " + approval.run.slice(0, 8) + "…";
    node.querySelector(".run-id").textContent = approval.run;
    const targets = (approval.reviewer && approval.reviewer.targets) || [];
    if (targets.length) node.querySelector(".reviewer").textContent = targets.join(", "); // else the blank card's words
    const q = approval.quorum;
    if (q && q.required > 1) {
      node.querySelector(".quorum").textContent = q.approved_by.length + " of " + q.required;
      node.querySelector(".quorum-tag").textContent = `${q.approved_by.length}/${q.required}`;
    } else node.querySelectorAll("[data-if-quorum]").forEach((el) => el.remove());
    const h = approval.handover;
    if (h) node.querySelector(".handover").textContent = h.by + (h.note ? ": “" + visible(h.note) + "”" : "");
    else node.querySelectorAll("[data-if-handover]").forEach((el) => el.remove());
    const expires = node.querySelector(".expires");
    expires.dateTime = approval.expires_at;
    expires.textContent = approval.expires_at;
    node.querySelector(".sha").textContent = approval.arguments_sha256;
    const details = urlFor(template.dataset.approvalUrl, approval.id);
    node.querySelector("a.details").href = details;
    summaryParts(node, approval, summary);
    if (approval.kind === "question") questionParts(node, approval.arguments || {});
    // The blank card holds every optional part: keep the ones that apply to this approval.
    node.querySelectorAll("[data-for-kind]").forEach((el) => {
      if (el.dataset.forKind !== approval.kind) el.remove();
    });
    node.querySelectorAll("[data-for-effect]").forEach((el) => {
      if (el.dataset.forEffect !== approval.effect) el.remove();
    });
    // The server refuses the run's submitter every decision on it: their card says so instead.
    const ownRun = approval.submitted_by === me ? "yes" : "no";
    node.querySelectorAll("[data-if-own-run]").forEach((el) => {
      if (el.dataset.ifOwnRun !== ownRun) el.remove();
    });
    if (!hasInvisible(approval.arguments)) node.querySelectorAll("[data-if-invisible]").forEach((el) => el.remove());
    node.querySelectorAll("form").forEach((form) => {
      form.action = details;
      form.querySelector("[name=checkpoint_id]").value = approval.checkpoint_id;
    });
    drawAsking(node);
    if (window.DeskPaneSign) window.DeskPaneSign.describe(node); // who signs, once this browser's keys are known
    arm(node); // only a shown (pending) approval is drawn: see upsert and applySnapshot
    return node;
  }

  // The server's summary of the preview (desk/cards.py), drawn as _card.html draws it: the
  // row's gist and risk line, the detail's title, warnings, key facts and first lines.
  function summaryParts(node, approval, summary) {
    const gist = node.querySelector(".gist");
    if (approval.kind === "question") gist.textContent = visible(String((approval.arguments || {}).question || ""));
    else if (summary) gist.textContent = summary.facts.map(([label, value]) => visible(label) + ": " + exact(value)).join(" · ");
    else gist.textContent = summary === undefined ? "reading the preview…" : "";
    if (summary && summary.risk) node.querySelector(".risk-line").textContent = visible(summary.risk);
    else node.querySelectorAll("[data-if-risk]").forEach((el) => el.remove());
    if (!summary) {
      node.querySelectorAll("[data-if-summary]").forEach((el) => el.remove());
    } else {
      node.querySelector(".preview-title").textContent = visible(summary.title);
      node.querySelector(".warnings").replaceChildren(
        ...summary.warnings.map((w) => {
          const li = document.createElement("li");
          li.className = "warning";
          li.textContent = "⚠ " + visible(w);
          return li;
        })
      );
      node.querySelector(".facts").replaceChildren(
        ...summary.facts.flatMap(([label, value]) => {
          const dt = document.createElement("dt");
          dt.textContent = visible(label);
          const dd = document.createElement("dd");
          dd.textContent = exact(value);
          return [dt, dd];
        })
      );
      node.querySelector(".body-lines").textContent = summary.body === null ? "" : exact(summary.body);
    }
    if (!(summary && summary.device_key)) node.querySelectorAll("[data-if-device-key]").forEach((el) => el.remove());
  }

  // The card endpoint's answer for one approval (desk/views/queue.py desk_card), or null.
  async function readCard(id) {
    try {
      const response = await fetch(urlFor(list.dataset.cardUrl, id), { credentials: "same-origin", headers: { Accept: "application/json" } });
      return response.ok ? await response.json() : null;
    } catch (error) {
      return null;
    }
  }

  // The model's words that made the call, read when its card is first selected (the page's
  // cards do not carry them: a long run's conversation is read for the one being looked at).
  const askingOf = new Map(); // approval id -> the model's text ("" when it said nothing)
  function drawAsking(node) {
    const box = node.querySelector(".asking-text");
    const text = askingOf.get(node.dataset.approvalId);
    if (!box || text === undefined) return;
    box.textContent = text ? visible(text) : "The model made the call without a message.";
    box.classList.toggle("muted", !text);
    node.dataset.asking = "read";
  }

  async function readAsking(node) {
    const id = node.dataset.approvalId;
    if (!node.querySelector(".asking-text") || askingOf.has(id)) return drawAsking(node);
    askingOf.set(id, undefined);
    const answer = await readCard(id);
    if (!answer) return askingOf.delete(id);
    askingOf.set(id, String(answer.asking || ""));
    const drawn = list.querySelector('li.card[data-approval-id="' + id + '"]');
    if (drawn) drawAsking(drawn);
  }

  // A card a live event drew has no preview yet (events carry none): ask the server for the
  // desk's view of it, then draw it again. Until then it is "pending": `a` and `A` wait for it.
  async function readSummary(id) {
    const answer = await readCard(id);
    if (!answer) return;
    if (typeof answer.asking === "string") askingOf.set(id, answer.asking);
    const node = list.querySelector('li.card[data-approval-id="' + id + '"]');
    const approval = latest.get(id);
    if (!node || !approval || node.dataset.summary !== "pending") return;
    upsertDrawn(node, { ...approval, desk: { ...(approval.desk || {}), summary: answer.desk.summary } });
  }

  // A redrawn card (a colleague's vote, a hand-over, a snapshot) keeps what the reviewer was
  // doing on it: the text typed in its fields, a pending `r`, and the focus and caret in a field.
  // Without this the reason vanished mid-word and the keys typed next went to the card, where
  // `a` approves and `o` opens. Returns the field to focus once `to` is on the page, or null.
  function carryOver(from, to) {
    if (!from) return null;
    // An open editor (edit.js) moves over whole, with what was typed in it and its caret.
    const editor = from.querySelector("form.edit-form");
    const place = to.querySelector("form.decide.tool-call");
    if (editor && place) {
      const active = editor.contains(document.activeElement) ? document.activeElement : null;
      const range = active && typeof active.selectionStart === "number" ? [active.selectionStart, active.selectionEnd] : [0, 0];
      place.after(editor);
      to.dataset.editing = "yes";
      if (active) return { field: active, start: range[0], end: range[1] };
    }
    const fields = (node) => [...node.querySelectorAll("input[name]:not([type=hidden])")];
    const was = fields(from);
    const now = fields(to);
    was.forEach((field, i) => {
      if (now[i] && now[i].name === field.name) now[i].value = field.value;
    });
    if (from.dataset.intent) to.dataset.intent = from.dataset.intent;
    const i = was.indexOf(document.activeElement);
    if (i < 0 || !now[i]) return null;
    return { field: now[i], start: was[i].selectionStart, end: was[i].selectionEnd };
  }

  function refocus(kept) {
    if (!kept) return;
    kept.field.focus({ preventScroll: true });
    if (typeof kept.field.selectionStart === "number") kept.field.setSelectionRange(kept.start, kept.end);
  }

  // The card's approve/reject buttons are served disabled (data-arm="desk"): clicked before this
  // script holds the card, one posted its form natively, with no confirmation of an
  // irreversible call, and Enter in the reason field approved (marked done, on a reconcile).
  function arm(node) {
    node.querySelectorAll("button[data-arm=desk]").forEach((button) => (button.disabled = false));
  }

  // A question's text and its options as buttons (text only); a schema is answered on its page.
  function questionParts(node, args) {
    node.querySelector(".question-text").textContent = visible(String(args.question || ""));
    const options = node.querySelector(".options");
    options.replaceChildren();
    const listed = Array.isArray(args.options) ? args.options : [];
    listed.forEach((option, i) => {
      const button = document.createElement("button");
      Object.assign(button, { type: "submit", name: "answer", value: String(option), className: "option" });
      const kbd = document.createElement("kbd");
      kbd.textContent = String(i + 1);
      const text = document.createElement("span");
      text.className = "option-text";
      text.textContent = exact(String(option));
      button.append(kbd, text);
      options.append(button);
    });
    // No options and no schema: a text answer, typed here (a schema is answered on its page).
    if ("options" in args || "schema" in args) node.querySelectorAll("[data-if-answer]").forEach((el) => el.remove());
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

  // --- selection and keys -------------------------------------------------------------
  function selected() {
    return list.querySelector("li.card[aria-current=true]");
  }

  function listHasFocus() {
    return list.contains(document.activeElement) || document.activeElement === document.body;
  }

  function select(node, { focus = true } = {}) {
    cards().forEach((c) => c.removeAttribute("aria-current"));
    if (!node) return;
    node.setAttribute("aria-current", "true");
    readAsking(node);
    if (focus) {
      node.focus({ preventScroll: true });
      node.scrollIntoView({ block: "nearest" });
    }
  }

  function move(step) {
    const all = cards();
    if (!all.length) return;
    const i = all.indexOf(selected());
    select(all[Math.max(0, Math.min(all.length - 1, i < 0 ? 0 : i + step))]);
  }

  function typing(target) {
    return target.closest("input, textarea, select, [contenteditable=true]");
  }

  // `a` and `r` on a card that takes no approval or rejection (a question; a call of the
  // reviewer's own run): say why, rather than nothing (`a`) or a throw on the missing reason
  // field (`r`). True when it said so.
  function refusedHere(node, verb) {
    const ownRun = node.querySelector(".own-run");
    if (ownRun) notice(ownRun.textContent, "info");
    else if (node.dataset.kind === "question") {
      notice("A question is answered, not " + verb + ": pick an option, or open it (o) to answer on its page.", "info");
    } else return false;
    return true;
  }

  function dialogOpen() {
    return (help && help.open) || (window.DeskDialog && window.DeskDialog.isOpen());
  }

  function openPage(node, hash) {
    if (node) location.href = node.querySelector("a.details").href + (hash || "");
  }

  // `a`: a batch when one is picked (batch.js), else this card, asking first only if unusual.
  function approveKey(node) {
    const batch = window.DeskBatch;
    if (batch && batch.size()) return batch.approve();
    if (!node) return;
    if (node.dataset.kind === "question") return answerKey(node);
    if (refusedHere(node, "approved")) return;
    decideWithCare(node, node.querySelector("button.approve"));
  }

  // A question: `a` or Enter puts the caret in its answer field; options take 1-9.
  function answerKey(node) {
    const field = node.querySelector("input.free-answer");
    if (field) return field.focus();
    notice("Pick an option with its number (1–9), or open it (o) to answer on its page.", "info");
  }

  function optionKey(node, n) {
    const option = node && node.querySelectorAll("form.decide.question button.option")[n - 1];
    if (option) decide(node, option);
  }

  document.addEventListener("keydown", (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.key === "Escape" && typing(event.target)) {
      const node = event.target.closest("li.card");
      event.target.blur();
      if (node) {
        delete node.dataset.intent;
        select(node);
      }
      return;
    }
    // Enter in a card's field: a reject after `r`, an answer in a question's field, otherwise
    // nothing. The browser would submit with the form's first button, Approve, which is never
    // what typing a reason means.
    if (event.target.closest("form.edit-form")) return; // the editor's keys are edit.js's
    if (event.key === "Enter" && event.target.matches("li.card input")) {
      event.preventDefault();
      const card = event.target.closest("li.card");
      if (event.target.matches("input.free-answer")) decide(card, card.querySelector("button.answer-send"));
      else if (card.dataset.intent === "reject") decide(card, card.querySelector("form button.reject"));
      return;
    }
    if (typing(event.target) || dialogOpen()) return;
    if (keysHeld()) return; // typed for a field that is gone: not a command
    const node = selected();
    if (/^[1-9]$/.test(event.key) && node && node.dataset.kind === "question") {
      event.preventDefault();
      optionKey(node, Number(event.key));
      return;
    }
    const actions = {
      j: () => move(1),
      k: () => move(-1),
      o: () => openPage(node),
      Enter: () => node && node.dataset.kind === "question" && answerKey(node),
      e: () => {
        if (!node || refusedHere(node, "edited")) return;
        if (window.DeskEdit && node.querySelector("button.edit-open")) window.DeskEdit.open(node);
        else openPage(node, "#edit");
      },
      h: () => openPage(node, "#handover"),
      g: () => openPage(node, "#grant"),
      a: () => approveKey(node),
      r: () => {
        if (!node || refusedHere(node, "rejected")) return;
        node.dataset.intent = "reject";
        node.querySelector("input[name=reason]").focus();
      },
      "?": () => help && help.showModal(),
    };
    const action = actions[event.key];
    if (action) {
      event.preventDefault();
      action();
    }
  });

  list.addEventListener("click", (event) => {
    const node = event.target.closest("li.card");
    if (node && node !== selected()) select(node, { focus: false });
  });

  list.addEventListener("focusin", (event) => {
    const node = event.target.closest("li.card");
    if (node && node !== selected()) select(node, { focus: false });
  });

  // --- deciding in place --------------------------------------------------------------
  // A button decides in place (Enter in a field is handled with the keys above).
  list.addEventListener("submit", (event) => {
    event.preventDefault();
    if (!event.target.matches("form.decide")) return; // the editor's form is edit.js's
    const button = event.submitter;
    if (button && button.tagName === "BUTTON") decideWithCare(event.target.closest("li.card"), button);
  });

  // Refusals no retry from this card can change (codes: reviewdesk/lib/errors.py).
  const REFUSED_FOR_GOOD = ["decided", "expired", "cancelled", "voted"];

  function parsed(text, fallback) {
    try {
      return JSON.parse(text || "null") || fallback;
    } catch (error) {
      return fallback;
    }
  }

  // What the confirmation says of one card: its name, the preview's key facts and first lines.
  function facts(node) {
    const pairs = [...node.querySelectorAll(".what .facts dt")].map((dt) => [dt.textContent, dt.nextElementSibling.textContent]);
    const body = node.querySelector(".what .body-lines");
    return {
      name: node.dataset.tool + " · " + node.dataset.agent,
      facts: pairs,
      body: body ? body.textContent : "",
      warnings: parsed(node.dataset.unusual, []),
    };
  }

  // Approving asks first only where something is unusual, as the server's summary says
  // (desk/cards.py: a preview warning, invisible characters, a quorum's last vote), in a page
  // dialog stating the facts. Otherwise the decision is made at once: a confirmation on every
  // email trained Enter. A card whose preview is still being read waits for it.
  async function decideWithCare(node, button) {
    if (!node || !button || button.disabled || node.dataset.busy) return;
    const approving = button.classList.contains("approve") && button.closest("form.tool-call");
    if (approving) {
      if (node.dataset.summary === "pending") {
        notice("Reading what " + node.dataset.tool + " will do: approve again in a moment.", "info");
        return;
      }
      const unusual = parsed(node.dataset.unusual, []);
      if (unusual.length) {
        const ok = await window.DeskDialog.confirm({
          title: "Approve this " + node.dataset.tool + "?",
          lead: "Something about this call is unusual: read it before you sign.",
          items: [facts(node)],
          ok: "Approve anyway",
        });
        if (!ok || !node.isConnected) return;
      }
    }
    return decide(node, button);
  }

  async function decide(node, button) {
    if (!node || !button || node.dataset.busy) return;
    if (button.disabled) return; // the keys too: not before arm(), nor after a refusal for good
    const form = button.form;
    const body = new FormData(form);
    if (button.name) body.set(button.name, button.value);
    form.querySelectorAll("button").forEach((b) => (b.disabled = true));
    const answer = await post(node, form.action, body);
    if (answer.decided) {
      notice(answer.detail, "success");
      settle(node, { focus: true });
    } else {
      notice(answer.detail, "error");
      // Refused for good (decided elsewhere, expired, cancelled, my vote already in): the
      // buttons stay off, and the approval's event takes the card away.
      if (!REFUSED_FOR_GOOD.includes(answer.code)) form.querySelectorAll("button").forEach((b) => (b.disabled = false));
    }
  }

  // One decision, posted to its approval's page: {decided, detail, code?}.
  async function post(node, action, body) {
    node.dataset.busy = "yes";
    decidedHere.add(node.dataset.approvalId);
    let answer;
    try {
      // A tool that runs only on a device-signed decision: signed here by this browser's key.
      if (window.DeskPaneSign && window.DeskPaneSign.needed(node, body)) answer = await window.DeskPaneSign.decide(node, body);
      else answer = await postForm(action, body);
    } catch (error) {
      answer = { decided: false, detail: "Not decided: the desk did not answer (" + error.message + ")." };
    }
    delete node.dataset.busy;
    if (!answer.decided) decidedHere.delete(node.dataset.approvalId);
    return answer;
  }

  async function postForm(action, body) {
    const response = await fetch(action, {
      method: "POST",
      body,
      headers: { Accept: "application/json" },
      credentials: "same-origin",
    });
    return isJson(response) ? response.json() : { decided: false, detail: "Not decided: " + pageAnswer(response) };
  }

  function isJson(response) {
    return (response.headers.get("Content-Type") || "").startsWith("application/json");
  }

  // The approval's page answers a decision it refused with JSON, but some refusals come before
  // it: a 404 page (handed over elsewhere, or a group left: no longer mine to see), the login
  // page (the session ended). Read as JSON they were "the desk did not answer".
  function pageAnswer(response) {
    if (response.redirected) return "your session has ended: log in again, then reload this page.";
    if (response.status === 404) return "this approval is no longer yours to see (handed over, or a group you left): reload.";
    return "the desk answered " + response.status + " " + response.statusText + ".";
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

  // For batch.js: the queue's cards, the current one, and one decision at a time.
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

  cards().forEach(arm); // the server's cards: the submit handler above holds them now
  drawBounds();
  if (cards().length) select(cards()[0], { focus: false });
  refreshCount();
  tick();
  setInterval(tick, 1000);
  connect();
})();
