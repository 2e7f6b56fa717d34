// The approval page: live countdown and state, the preview redrawn as the reviewer edits,
// the schema checked as they type, a diff before an edit is signed, and keys.
(function () {
  "use strict";
  const page = document.getElementById("approval");
  const { visible, exact, hasInvisible, shownJson } = window.DeskShown;
  const approvalId = page.dataset.approvalId;
  const help = document.getElementById("keys-help");
  const decideForm = document.getElementById("decide-form");
  const editDetails = document.getElementById("edit");
  const editForm = document.getElementById("edit-form");
  const schema = JSON.parse(document.getElementById("tool-schema").textContent);
  const original = JSON.parse(document.getElementById("original-arguments").textContent);
  // Whether the decision buttons are armed (armDecisions, below): until then nothing here
  // enables one, not even the edit's schema check (a click would post natively, server-signed).
  let armed = false;

  // --- countdown ----------------------------------------------------------------------
  const countdowns = page.querySelectorAll(".countdown[data-expires]"); // expiry, and the target if any
  // Without time.js the countdowns stay as served: the page must still work (and arm below).
  const tick = () =>
    window.DeskTime &&
    countdowns.forEach((c) => window.DeskTime.show(c, c.dataset.expires, c.classList.contains("target") ? "target" : "expires"));
  tick();
  setInterval(tick, 1000);

  // --- someone else decided: say so, and disable the buttons --------------------------
  function gone(text) {
    const note = document.getElementById("decided-notice");
    note.textContent = text;
    note.hidden = false;
    page.dataset.status = "decided";
    document.querySelectorAll("form.decide button, form.decide input, form.decide textarea, #handover-form button").forEach((el) => {
      el.disabled = true;
    });
    const editLink = document.getElementById("edit-link");
    if (editLink) editLink.hidden = true;
    // The bar is where the reviewer's eyes are: it says so too (the notice above is the one
    // a screen reader hears), in place of the reason field.
    const barGone = document.getElementById("bar-gone");
    if (barGone) {
      barGone.textContent = text;
      barGone.hidden = false;
      decideForm.querySelector(".reason-field").hidden = true;
    }
  }

  // Still pending, but changed: a quorum vote ("1 of 2") or a hand-over (maybe away from me).
  function onPendingChange(approval) {
    const count = document.getElementById("quorum-count");
    const q = approval.quorum;
    if (count && q) {
      count.textContent = q.approved_by.length + " of " + q.required;
      document.getElementById("quorum-by").textContent = q.approved_by.length ? "approved by " + q.approved_by.join(", ") : "";
    }
    // A vote changes what approving means (the last one runs the call): the server says anew.
    if (q && String(q.approved_by.length) !== page.dataset.votes) {
      page.dataset.votes = String(q.approved_by.length);
      rereadSummary();
    }
    // So does a second opinion that arrives (a high one asks first): read anew, then drawn.
    if (readingKey(approval.reading) !== readingKey(summary && summary.reading)) {
      if (summary) summary = { ...summary, reading: approval.reading }; // until the server's answer
      rereadSummary(drawReading);
    }
    const targets = (approval.reviewer && approval.reviewer.targets) || [];
    const users = (approval.reviewer && approval.reviewer.users) || [];
    document.getElementById("approval-targets").firstChild.textContent = (targets.length ? targets.join(", ") : "any reviewer") + " ";
    const h = approval.handover;
    if (h && targets.length && !users.includes(page.dataset.username) && page.dataset.admin !== "yes") {
      gone("Handed over to " + targets.join(", ") + " by " + h.by + (h.note ? ": “" + visible(h.note) + "”" : "") + ". This page's buttons are off.");
    }
  }

  function onApproval(approval) {
    if (approval.id !== approvalId || page.dataset.status !== "pending") return;
    if (approval.status === "pending") {
      onPendingChange(approval);
      return;
    }
    document.getElementById("approval-status").textContent = approval.status;
    const d = approval.decision;
    if (d) gone("Decided by " + d.reviewer + " (" + d.verdict + ", " + window.DeskTime.inWords(new Date(d.decided_at) - Date.now()) + "): this page's buttons are off.");
    else gone("No longer pending: " + approval.status + ". This page's buttons are off.");
  }

  let lastSeq = 0;
  let socket = null;
  function connect() {
    if (page.dataset.status !== "pending") return;
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    // The snapshot is one page of the queue: ask for this run's, where this approval sits.
    const query = page.dataset.run ? "?run=" + encodeURIComponent(page.dataset.run) : "";
    socket = new WebSocket(scheme + location.host + page.dataset.socketPath + query);
    socket.onmessage = (event) => {
      const m = JSON.parse(event.data);
      if (m.type === "snapshot") {
        lastSeq = m.seq;
        page.dataset.socket = "live"; // from here on, a colleague's decision reaches this page
        // What changed between the page's render and this socket (a vote, a hand-over) came as
        // no event: the snapshot's row says it.
        const queued = m.data.approvals.find((a) => a.id === approvalId);
        if (queued) onApproval(queued);
        // A voter's own queue no longer lists an item their vote is in: that is not "decided".
        else if (page.dataset.voted !== "yes" && !m.data.more) {
          gone("No longer pending: someone decided it, or it expired. Reload to see the decision.");
        }
      } else if (m.type === "approval.created" || m.type === "approval.updated") {
        lastSeq = Math.max(lastSeq, m.seq);
        onApproval(m.data);
      } else if (m.type === "heartbeat" && m.seq > lastSeq) {
        socket.send(JSON.stringify({ type: "replay", after: lastSeq }));
      } else if (m.type === "replay.done") {
        lastSeq = m.seq;
      }
    };
    socket.onclose = (event) => {
      if (event.code !== 4403 && page.dataset.status === "pending") setTimeout(connect, 2000);
    };
  }
  try {
    connect();
  } catch (error) {
    // No live updates (a socket refused by the browser): deciding must still work. The
    // server refuses a decision on an approval that is no longer pending.
  }

  // --- approving asks first only where something is unusual ----------------------------
  // As on the desk: the server's summary of the call (desk/cards.py call_summary, served in
  // #call-summary) lists what is unusual about approving it: a preview warning, invisible
  // characters, a quorum's last vote. Only then does approving ask, in the page dialog
  // (dialog.js) stating the facts; otherwise it decides at once. An edit asks on the summary of
  // its edited arguments (the preview endpoint's, the same rule). Rejecting never asks.
  const summaryNode = document.getElementById("call-summary");
  let summary = summaryNode ? JSON.parse(summaryNode.textContent) : null;
  let rereading = null; // the summary read again after a vote: a promise, until it answers
  let edited = { sent: null, summary: null }; // the summary of the edited arguments last read
  let passing = null; // the button whose confirmed submit is let through (send, below)

  const isUnusual = (s) => !!(s && s.unusual && s.unusual.length);

  function refused(text) {
    const note = document.getElementById("decided-notice");
    note.textContent = text;
    note.className = "flash error";
    note.hidden = false;
  }

  // The preview endpoint's answer for `value` ({preview, errors, summary}); when it cannot be
  // read, a summary saying so: a call the desk could not read is unusual.
  async function previewOf(value) {
    try {
      const token = document.querySelector("[name=csrfmiddlewaretoken]").value;
      const response = await fetch(page.dataset.previewUrl, {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/json", "X-CSRFToken": token, Accept: "application/json" },
        body: JSON.stringify({ arguments: value }),
      });
      const result = await response.json();
      if (!result.summary && !result.preview) throw new Error(result.detail || "no summary (" + response.status + ")");
      return result;
    } catch (error) {
      const why = "the desk could not read what this call would do (" + error.message + "): judge by the arguments";
      return { preview: null, errors: [why], summary: { facts: [], body: null, unusual: [why] } };
    }
  }

  function rereadSummary(then) {
    if (!summary || !decideForm || page.dataset.status !== "pending") return;
    const reading = previewOf(original).then((result) => {
      if (result.summary) summary = result.summary;
      if (result.summary && then) then(result.summary);
    });
    rereading = reading.finally(() => {
      if (rereading === reading) rereading = null;
    });
  }

  // What tells one reading from another: its state, its risk and when it was made.
  function readingKey(reading) {
    return reading ? [reading.status, reading.risk, reading.at, reading.error].join("|") : "";
  }

  // The second opinion block as _sources.html draws it (on_page), from the server's summary:
  // its level, words and concerns are the server's (desk/cards.py reading_view).
  function drawReading(s) {
    const box = document.getElementById("beside-call");
    if (!box) return;
    const old = box.querySelector("section.reading");
    if (!s.reading) return old && old.remove();
    const el = (tag, cls, text) => {
      const n = document.createElement(tag);
      if (cls) n.className = cls;
      if (text !== undefined) n.textContent = text;
      return n;
    };
    const section = el("section", "reading");
    section.dataset.level = s.reading_level;
    section.setAttribute("aria-label", "Second opinion");
    const head = el("h2", "", "Second opinion ");
    head.id = "reading-title";
    head.append(el("span", "untrusted-tag", "model output, advice only"));
    const said = el("p", "reading-said");
    said.append(el("span", "reading-risk", visible(s.reading_said)));
    if (s.reading.model) said.append(" ", el("span", "reading-model", "· " + visible(s.reading.model)));
    section.append(head, said);
    if (s.reading.summary && s.reading_level !== "pending" && s.reading_level !== "unavailable") {
      section.append(el("p", "reading-summary", visible(s.reading.summary)));
    }
    const concerns = el("ul", "concerns");
    (s.concerns || []).forEach((c) => {
      const li = el("li");
      if (c.row !== null && c.row !== undefined) {
        const a = el("a", "", visible(c.label));
        a.href = "#arg-" + c.row;
        li.append(a, ": ");
      } else if (c.about) li.append(el("span", "about", visible(c.label)), ": ");
      li.append(visible(c.text));
      concerns.append(li);
    });
    section.append(concerns);
    if (old) old.replaceWith(section);
    else box.append(section);
  }

  // Ask about `s` (a summary) in the page dialog, if it lists anything unusual: true to go on.
  function askIfUnusual(s, isEdit) {
    if (!isUnusual(s)) return Promise.resolve(true);
    if (!window.DeskDialog) {
      refused("Not decided: the confirmation did not load. Reload the page.");
      return Promise.resolve(false);
    }
    return window.DeskDialog.confirm({
      title: (isEdit ? "Sign the edited " : "Approve this ") + page.dataset.tool + "?",
      lead: "Something about " + (isEdit ? "the edited call" : "this call") + " is unusual: read it before you sign.",
      items: [
        {
          name: page.dataset.tool + " · " + page.dataset.agent,
          facts: (s.facts || []).map(([label, value]) => [visible(label), exact(value)]),
          body: s.body === null || s.body === undefined ? "" : exact(s.body),
          warnings: s.unusual.map((w) => visible(w)),
        },
      ],
      ok: isEdit ? "Sign the edit anyway" : "Approve anyway",
    });
  }

  // Hold this submit (prevented, so approval_sign.js skips it too), and once `ask()` says yes
  // send the form again with the same button. That second submit passes the handlers here
  // untouched: approval_sign.js signs it with the device key, or the browser posts it.
  function holdThenSend(event, form, button, ask) {
    event.preventDefault();
    ask().then((ok) => {
      if (!ok || page.dataset.status !== "pending" || button.disabled) return;
      passing = button;
      try {
        form.requestSubmit(button); // its submit event fires within this call
      } finally {
        passing = null;
      }
    });
  }

  let intent = null;
  if (decideForm) {
    // Enter in a field: a reject after `r`, otherwise nothing. The browser would submit
    // with the form's first button, Approve: never what typing a reason means.
    decideForm.addEventListener("keydown", (event) => {
      if (event.key !== "Enter" || !event.target.matches("input")) return;
      event.preventDefault();
      if (intent === "reject") decideForm.querySelector("button.reject").click();
    });
    decideForm.addEventListener("submit", (event) => {
      const button = event.submitter;
      if (!button || button.tagName !== "BUTTON") return event.preventDefault();
      if (button === passing || !button.classList.contains("approve")) return;
      if (!rereading && !isUnusual(summary)) return; // ordinary: decided at once
      holdThenSend(event, decideForm, button, async () => {
        if (rereading) await rereading;
        return askIfUnusual(summary, false);
      });
    });
  }

  // Enter in a one-line field of an answer, a reconciliation or an edit: nothing. The browser
  // would submit with the form's first button: the first of a question's options, "It happened:
  // mark done", or the edit's own (once to show the diff, once more to sign the edited
  // arguments). A note typed there is never an answer, nor an approval.
  ["answer-form", "reconcile-form", "edit-form"].forEach((id) => {
    const form = document.getElementById(id);
    if (!form) return;
    form.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && event.target.matches("input")) event.preventDefault();
    });
  });

  // --- edit: schema as you type, preview redrawn, a diff before signing ----------------
  const textarea = document.getElementById("edit-arguments");
  const errorsList = document.getElementById("schema-errors");
  const diff = document.getElementById("diff");
  const submit = document.getElementById("edit-submit");
  const back = document.getElementById("edit-back");
  let reviewed = false;
  let parsed = original;
  let timer = null;

  function showErrors(errors) {
    errorsList.replaceChildren(
      ...errors.map((e) => {
        const li = document.createElement("li");
        li.textContent = visible(e);
        return li;
      })
    );
    textarea.setAttribute("aria-invalid", errors.length ? "true" : "false");
    submit.disabled = !armed || errors.length > 0;
  }

  function drawPreview(result) {
    const box = document.getElementById("preview");
    const nodes = [];
    const el = (tag, cls, text) => {
      const n = document.createElement(tag);
      if (cls) n.className = cls;
      if (text !== undefined) n.textContent = text;
      return n;
    };
    const p = result.preview;
    if (p) {
      nodes.push(el("p", "preview-title", visible(p.title)));
      (p.warnings || []).forEach((w) => nodes.push(el("p", "warning", "⚠ " + visible(w))));
      const dl = el("dl", "preview-rows");
      (p.rows || []).forEach(([label, value]) => {
        dl.appendChild(el("dt", "", visible(label)));
        const dd = el("dd", "", exact(value));
        if (hasInvisible(String(value))) dd.append(" ", el("span", "invisible-flag", "⚠ contains invisible characters"));
        dl.appendChild(dd);
      });
      nodes.push(dl);
      if (p.body !== null && p.body !== undefined) {
        nodes.push(el("pre", "preview-body", exact(p.body)));
        if (hasInvisible(p.body)) nodes.push(el("p", "invisible-flag", "⚠ the body contains invisible characters (shown escaped)"));
      }
    } else {
      (result.errors || []).forEach((e) => nodes.push(el("p", "warning", "⚠ " + visible(e))));
      if (!nodes.length) nodes.push(el("p", "muted", result.detail || "No preview."));
    }
    box.replaceChildren(...nodes);
    box.dataset.fresh = String(Date.now());
  }

  async function refreshPreview(value) {
    const sent = JSON.stringify(value);
    const result = await previewOf(value);
    if (textarea.dataset.sent !== sent) return; // a stale answer
    edited = { sent: sent, summary: result.summary };
    drawPreview(result);
  }

  function resetReview() {
    reviewed = false;
    diff.hidden = true;
    back.hidden = true;
    submit.textContent = "Review the changes";
  }

  function onEdit() {
    resetReview();
    try {
      parsed = JSON.parse(textarea.value);
    } catch (error) {
      showErrors(["not valid JSON: " + error.message]);
      return;
    }
    const errors = window.DeskSchema.errors(schema, parsed);
    showErrors(errors);
    if (errors.length) return;
    clearTimeout(timer);
    timer = setTimeout(() => {
      textarea.dataset.sent = JSON.stringify(parsed);
      refreshPreview(parsed);
    }, 250);
  }

  function sortedKeys(value) {
    if (Array.isArray(value)) return value.map(sortedKeys);
    if (value && typeof value === "object") {
      return Object.fromEntries(Object.keys(value).sort().map((key) => [key, sortedKeys(value[key])]));
    }
    return value;
  }

  // A line diff (longest common subsequence) of the two pretty-printed documents.
  function lineDiff(a, b) {
    const n = a.length;
    const m = b.length;
    const lcs = Array.from({ length: n + 1 }, () => new Array(m + 1).fill(0));
    for (let i = n - 1; i >= 0; i--) {
      for (let j = m - 1; j >= 0; j--) {
        lcs[i][j] = a[i] === b[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
      }
    }
    const out = [];
    let i = 0;
    let j = 0;
    while (i < n || j < m) {
      if (i < n && j < m && a[i] === b[j]) {
        out.push([" ", a[i++]]);
        j++;
      } else if (j < m && (i >= n || lcs[i][j + 1] >= lcs[i + 1][j])) out.push(["+", b[j++]]);
      else out.push(["-", a[i++]]);
    }
    return out;
  }

  function showDiff() {
    // Both sides with sorted keys: PostgreSQL stores JSON objects in its own key order, and a
    // reordering is not a change to sign.
    const lines = lineDiff(shownJson(sortedKeys(original)).split("\n"), shownJson(sortedKeys(parsed)).split("\n"));
    const pre = document.getElementById("diff-lines");
    pre.replaceChildren(
      ...lines.map(([mark, text]) => {
        const span = document.createElement("span");
        span.className = mark === "+" ? "ins" : mark === "-" ? "del" : "same";
        span.textContent = mark + " " + text + "\n";
        return span;
      })
    );
    diff.hidden = false;
    back.hidden = false;
    reviewed = true;
    submit.textContent = "Sign and approve the edited arguments";
  }

  if (editForm) {
    textarea.addEventListener("input", onEdit);
    editForm.addEventListener("submit", (event) => {
      if (event.submitter === passing) return;
      if (!reviewed) {
        event.preventDefault();
        onEdit();
        if (!submit.disabled) showDiff();
        return;
      }
      // What is signed is the edited arguments: asked about as they are, read for them.
      const value = parsed;
      const sent = JSON.stringify(value);
      const known = edited.sent === sent ? edited.summary : null;
      if (known && !isUnusual(known)) return; // ordinary, and already read: signed at once
      holdThenSend(event, editForm, submit, async () => askIfUnusual(known || (await previewOf(value)).summary, true));
    });
    back.addEventListener("click", () => {
      resetReview();
      textarea.focus();
    });
  }

  function openHandover() {
    const handover = document.getElementById("handover-details");
    if (!handover) return;
    handover.open = true;
    handover.querySelector("input[name=to]").focus();
  }

  function openEdit() {
    if (!editDetails) return;
    editDetails.open = true;
    textarea.focus();
  }

  // The decision bar is one row; its note and grant fields fold above it, out of the way.
  const moreButton = document.getElementById("bar-more");
  const extras = document.getElementById("bar-extras");
  function showExtras(open) {
    if (!extras) return;
    extras.hidden = !open;
    moreButton.setAttribute("aria-expanded", String(open));
  }
  if (moreButton) {
    moreButton.addEventListener("click", () => {
      const opening = extras.hidden;
      showExtras(opening);
      if (opening) extras.querySelector("input[name=note]").focus();
    });
  }

  // Grant ahead of time: the fields open with the grant ticked; Approve then signs both.
  function openGrant() {
    const grant = document.getElementById("grant");
    if (!grant) return;
    showExtras(true);
    grant.open = true;
    document.getElementById("grant-on").checked = true;
    document.getElementById("grant-on").focus();
  }

  // The desk's `e`, `h` and `g` open this page at #edit, #handover or #grant, with the caret in
  // the part they name. Done again once the page has loaded: the browser's own scroll to the
  // fragment then moves focus to the page (the target is no field), and the keys typed next
  // went to the page, not to the part they were opened for.
  function openFromHash() {
    if (location.hash === "#edit") openEdit();
    if (location.hash === "#handover") openHandover();
    if (location.hash === "#grant" && page.dataset.status === "pending") openGrant();
  }
  openFromHash();
  window.addEventListener("load", () => setTimeout(openFromHash), { once: true });
  const editLink = document.getElementById("edit-link");
  if (editLink) {
    editLink.addEventListener("click", (event) => {
      event.preventDefault();
      openEdit();
    });
  }

  // --- the decision buttons: served disabled (data-arm), enabled once handled ----------
  // Before, a click posts the form natively: no confirmation, no diff, Enter approving. With
  // an endorsed device key, approval_sign.js enables them once it knows who signs, or the
  // click would be signed by the server while this browser holds the reviewer's key.
  function armDecisions() {
    if (page.dataset.status !== "pending") return; // gone() turned them off for good
    armed = true;
    document.querySelectorAll("button[data-arm]").forEach((button) => {
      // The edit's submit stays off while what was typed before now fails the schema.
      button.disabled = button === submit && !!textarea && textarea.getAttribute("aria-invalid") === "true";
    });
    focusAnswer();
  }
  window.DeskApproval = { armDecisions: armDecisions };

  // --- a question: its answer takes focus, its options answer to 1-9 ------------------
  const answerForm = document.getElementById("answer-form");
  // The first option once armed (a disabled button takes no focus), or the first field now.
  function focusAnswer() {
    if (!answerForm || page.dataset.status !== "pending" || location.hash) return;
    const active = document.activeElement;
    if (active && active !== document.body && !answerForm.contains(active)) return; // the reviewer is elsewhere
    const options = answerForm.querySelectorAll("button.option");
    const first = options.length
      ? answerForm.querySelector("button.option:not(:disabled)")
      : answerForm.querySelector("textarea, select, input:not([type=hidden])");
    if (first) first.focus();
  }
  focusAnswer(); // a text answer's field is not served disabled: it takes focus now

  if (!(page.dataset.deviceKeys || "").trim()) armDecisions();

  // --- keys ---------------------------------------------------------------------------
  document.addEventListener("keydown", (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    if (window.DeskDialog && window.DeskDialog.isOpen()) return; // its own keys: Esc, Tab, Enter
    const field = event.target.closest("input, textarea, select");
    if (event.key === "Escape" && field) {
      intent = null;
      field.blur();
      return;
    }
    if (field || (help && help.open)) return;
    const pending = page.dataset.status === "pending" && decideForm;
    const actions = {
      a: () => pending && decideForm.querySelector("button.approve").click(),
      r: () => {
        if (!pending) return;
        intent = "reject";
        decideForm.querySelector("input[name=reason]").focus();
      },
      e: () => pending && openEdit(),
      h: () => page.dataset.status === "pending" && openHandover(),
      g: () => pending && openGrant(),
      "?": () => help && help.showModal(),
    };
    const option = answerForm && /^[1-9]$/.test(event.key) && answerForm.querySelector('button.option[data-key="' + event.key + '"]');
    if (option) {
      event.preventDefault();
      if (!option.disabled && page.dataset.status === "pending") option.click();
      return;
    }
    const action = actions[event.key];
    if (action) {
      event.preventDefault();
      action();
    }
  });
})();
