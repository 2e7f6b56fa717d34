// Draws one card of the desk: templates/desk/_card.html, rendered blank into #card-template,
// cloned and filled by slot from an approval's payload and the server's summary of its preview
// (desk/cards.py), as the server renders it. Also reads a card's view from the card endpoint, and
// the model's words that made the call, and carries what the reviewer was doing on a card into
// its redrawn copy. It keeps no queue: desk.js decides which cards are drawn, and where.
(function () {
  "use strict";
  const list = document.getElementById("approvals");
  const template = document.getElementById("card-template");
  const { visible, exact, hasInvisible, shownJson } = window.DeskShown;
  const me = list.dataset.username;

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
    externalParts(node, approval);
    drawAsking(node);
    if (window.DeskPaneSign) window.DeskPaneSign.describe(node); // who signs, once this browser's keys are known
    arm(node); // only a shown (pending) approval is drawn: see desk.js's upsert and applySnapshot
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
    sourceParts(node, approval, summary);
  }

  // Where each argument came from and the second opinion, as _sources.html draws them from the
  // server's summary: the words are the server's (source labels, the reading's level and line).
  function sourceParts(node, approval, summary) {
    const drop = (slot) => node.querySelectorAll("[" + slot + "]").forEach((el) => el.remove());
    const el = (tag, cls, text) => {
      const n = document.createElement(tag);
      if (cls) n.className = cls;
      if (text !== undefined) n.textContent = text;
      return n;
    };
    const anchor = (i) => "arg-" + approval.id + "-" + i;
    if (!summary || !summary.reading) drop("data-if-reading");
    if (!summary) return;
    const rows = summary.provenance;
    if (rows) {
      node.querySelector(".provenance").replaceChildren(
        ...rows.flatMap((row, i) => {
          const dd = el("dd", "arg" + (row.warning ? " flagged" : row.untrusted ? " untrusted" : ""));
          dd.id = anchor(i);
          dd.append(el("span", "arg-value", exact(row.value)), " ", el("span", "source", (row.warning ? "⚠ " : "") + visible(row.label)));
          return [el("dt", "", visible(row.name)), dd];
        })
      );
    } else drop("data-if-provenance");
    if (summary.provenance_note) node.querySelector(".provenance-note").textContent = summary.provenance_note;
    else drop("data-if-provenance-note");
    if (!summary.reading) return;
    node.querySelector(".reading-line").textContent = summary.reading_line;
    node.querySelectorAll(".reading-line, section.reading").forEach((part) => (part.dataset.level = summary.reading_level));
    node.querySelector(".reading-risk").textContent = visible(summary.reading_said);
    const model = node.querySelector(".reading-model");
    if (summary.reading.model) model.textContent = "· " + visible(summary.reading.model);
    else model.remove();
    const level = summary.reading_level;
    if (summary.reading.summary && level !== "pending" && level !== "unavailable") {
      node.querySelector(".reading-summary").textContent = visible(summary.reading.summary);
    } else drop("data-if-reading-summary");
    node.querySelector(".concerns").replaceChildren(
      ...summary.concerns.map((c) => {
        const li = el("li");
        if (c.row !== null && c.row !== undefined) {
          const a = el("a", "", visible(c.label));
          a.href = "#" + anchor(c.row);
          li.append(a, ": ");
        } else if (c.about) li.append(el("span", "about", visible(c.label)), ": ");
        li.append(visible(c.text));
        return li;
      })
    );
  }

  // An external run's call (its framework's, outside the desk): where it comes from, the
  // framework's own rendering (untrusted), and what the framework cannot do, as _card.html says
  // it. No Edit where the call lists no edit: the server would refuse it (422 verdict).
  function externalParts(node, approval) {
    const ext = approval.external;
    const verdicts = approval.verdicts || ["approve", "reject", "edit"];
    const drop = (slot) => node.querySelectorAll("[" + slot + "]").forEach((el) => el.remove());
    if (!verdicts.includes("edit")) drop("data-if-edit");
    if (!ext) {
      ["data-if-external", "data-if-external-preview", "data-if-no-edit", "data-if-all-or-nothing"].forEach(drop);
      return;
    }
    node.dataset.schema = ext.schema ? asciiJson(ext.schema) : "";
    node.querySelectorAll(".framework").forEach((el) => (el.textContent = ext.framework));
    node.querySelector(".external-id").textContent = ext.external_id;
    if (ext.preview) node.querySelector(".preview-text").textContent = visible(ext.preview);
    else drop("data-if-external-preview");
    if (verdicts.includes("edit")) drop("data-if-no-edit");
    if (ext.resume_policy !== "all_or_nothing") drop("data-if-all-or-nothing");
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

  // The card's approve/reject buttons are served disabled (data-arm="desk"): clicked before the
  // desk's scripts hold the card (desk_decide.js's submit handler), one posted its form natively,
  // with no confirmation of an irreversible call, and Enter in the reason field approved (marked
  // done, on a reconcile).
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

  // For desk.js (and the keys' selection): a card drawn, read, and redrawn.
  window.DeskCard = { card, carryOver, refocus, arm, readCard, readAsking, knowAsking: (id, text) => askingOf.set(id, text) };
})();
