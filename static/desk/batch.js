// Batch deciding on the desk: pick several pending tool calls (x, shift-A for "all similar",
// "Select all of this run"), then approve them (the button, or `a`), or reject them with one
// reason, in one go. "All similar" never sweeps in the unusual: a call whose preview warns, whose
// arguments hold invisible characters, or whose preview is not read yet is picked only by an
// explicit `x`. Approving a batch always shows a page dialog listing each call's key facts.
// Each call still gets its own signed decision: one POST per item to its approval's page,
// through desk.js (window.DeskQueue), and each refusal is reported with its item.
// Questions and reconcile items have no checkbox: they need more than a plain approve.
(function () {
  "use strict";
  const queue = window.DeskQueue;
  const list = document.getElementById("approvals");
  const bar = document.getElementById("batch");
  const countText = document.getElementById("batch-count");
  const reasonInput = document.getElementById("batch-reason");
  const help = document.getElementById("keys-help");
  if (!queue || !list || !bar) return;
  const picked = new Set(); // approval ids, in the order they were picked: the first is the reference
  let deciding = false;

  function byId(id) {
    return list.querySelector('li.card[data-approval-id="' + id + '"]');
  }

  function selectable(node) {
    return !!node && !!node.querySelector("input.batch-pick") && !node.dataset.busy;
  }

  function label(node) {
    return node.dataset.tool + " (run " + node.dataset.run.slice(0, 8) + "…)";
  }

  // What the server's summary (desk/cards.py) marks unusual, or not read yet: never swept in.
  function unusual(node) {
    return node.dataset.summary !== "ready" || queue.parsed(node.dataset.unusual, []).length > 0 || !!node.querySelector(".invisible-flag");
  }

  function shown(value) {
    const text = JSON.stringify(value === undefined ? null : value);
    return window.DeskShown.visible(text.length > 80 ? text.slice(0, 79) + "…" : text);
  }

  function argumentsOf(node) {
    try {
      const value = JSON.parse(node.dataset.arguments || "null");
      return value && typeof value === "object" && !Array.isArray(value) ? value : { "": value };
    } catch (error) {
      return {};
    }
  }

  // The fields of a card's arguments whose values differ from the first picked card's, each
  // with this card's value ("to: linus@example.org"): a name alone said nothing.
  function differing(node, reference) {
    const mine = argumentsOf(node);
    const theirs = argumentsOf(reference);
    const keys = [...new Set([...Object.keys(theirs), ...Object.keys(mine)])];
    return keys.filter((k) => JSON.stringify(mine[k]) !== JSON.stringify(theirs[k])).map((k) => (k ? k + ": " : "") + shown(mine[k]));
  }

  // Draw the selection on the cards as they are now (desk.js redraws cards on every push).
  function draw() {
    const present = queue.cards();
    const ids = new Set(present.map((c) => c.dataset.approvalId));
    [...picked].forEach((id) => ids.has(id) || picked.delete(id)); // decided, or left the page
    const reference = picked.size ? byId([...picked][0]) : null;
    present.forEach((node) => {
      const on = picked.has(node.dataset.approvalId);
      const box = node.querySelector("input.batch-pick");
      if (box) box.checked = on;
      // Served disabled (data-arm="batch"): a pick made before this script was lost here.
      node.querySelectorAll("[data-arm=batch]").forEach((control) => (control.disabled = false));
      if (on) node.dataset.picked = "yes";
      else delete node.dataset.picked;
      const differs = node.querySelector(".differs");
      if (!differs) return;
      const fields = on && reference && node !== reference ? differing(node, reference) : [];
      differs.querySelector(".fields").replaceChildren(
        ...fields.flatMap((f, i) => {
          const mark = document.createElement("mark");
          mark.textContent = f;
          return i ? [", ", mark] : [mark];
        })
      );
      differs.hidden = !fields.length;
    });
    bar.hidden = !picked.size;
    countText.textContent = picked.size + " selected";
  }

  function toggle(node) {
    if (!selectable(node)) return;
    const id = node.dataset.approvalId;
    if (picked.has(id)) picked.delete(id);
    else picked.add(id);
    draw();
  }

  function pickAll(test) {
    queue.cards().filter((c) => selectable(c) && test(c)).forEach((c) => picked.add(c.dataset.approvalId));
    draw();
  }

  // The current card first, so the others are compared with it. Only the usual ones: the
  // count of those left out is said, so a reviewer knows to look at them.
  function pickSimilar(node) {
    if (!selectable(node)) return;
    if (!unusual(node)) picked.add(node.dataset.approvalId);
    const similar = queue.cards().filter((c) => selectable(c) && c.dataset.tool === node.dataset.tool);
    const left = similar.filter(unusual);
    pickAll((c) => c.dataset.tool === node.dataset.tool && !unusual(c));
    if (left.length) {
      queue.notice(
        left.length + " similar " + node.dataset.tool + (left.length > 1 ? " calls were" : " call was") +
          " left out: a warning, invisible characters or a preview not read yet. Pick one with x after reading it.",
        "info"
      );
    }
  }

  function pickRun(node) {
    if (!selectable(node)) return;
    picked.add(node.dataset.approvalId);
    pickAll((c) => c.dataset.run === node.dataset.run);
  }

  // One page dialog lists every call of the batch, its key facts and warnings, before any is
  // approved.
  function confirmed(nodes, verdict) {
    if (verdict !== "approve") return Promise.resolve(true);
    const irreversible = nodes.filter((n) => n.dataset.effect === "external").length;
    return window.DeskDialog.confirm({
      title: "Approve " + nodes.length + (nodes.length > 1 ? " calls?" : " call?"),
      lead: (irreversible ? irreversible + " of them act outside the desk and cannot be undone. " : "") + "Each is signed on its own.",
      items: nodes.map(queue.facts),
      ok: "Approve " + nodes.length,
    });
  }

  async function decideAll(which) {
    if (deciding) return;
    const nodes = [...picked].map(byId).filter(selectable);
    if (!nodes.length) return;
    const verdict = nodes[0].querySelector("form.decide.tool-call button." + which).value;
    if (!(await confirmed(nodes, verdict))) return;
    deciding = true;
    bar.querySelectorAll("button").forEach((b) => (b.disabled = true));
    const reason = which === "reject" ? reasonInput.value.trim() : "";
    let done = 0;
    const refused = [];
    for (const node of nodes) {
      const form = node.querySelector("form.decide.tool-call");
      const body = new FormData(form);
      body.set("verdict", verdict);
      body.set("reason", reason);
      const answer = await queue.post(node, form.action, body);
      picked.delete(node.dataset.approvalId);
      if (answer.decided) {
        done += 1;
        queue.settle(node, { focus: false });
      } else {
        refused.push(label(node) + ": " + String(answer.detail || "").replace(/^Not decided: /, ""));
      }
    }
    const past = which === "reject" ? "rejected" : "approved";
    let text = done + " " + past;
    if (refused.length) text += ", " + refused.length + " refused: " + refused.join("; ");
    queue.notice(text, refused.length ? "error" : "success");
    if (!refused.length) reasonInput.value = "";
    deciding = false;
    bar.querySelectorAll("button").forEach((b) => (b.disabled = false));
    draw();
  }

  function typing(target) {
    return target.closest("input, textarea, select, [contenteditable=true]");
  }

  document.addEventListener("keydown", (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    if (typing(event.target) || (help && help.open) || window.DeskDialog.isOpen()) return;
    if (queue.keysHeld()) return; // typed for a field that is gone (desk.js): not a command
    if (event.key === "x") {
      event.preventDefault();
      toggle(queue.selected());
    } else if (event.key === "A") {
      event.preventDefault();
      pickSimilar(queue.selected());
    }
  });

  list.addEventListener("change", (event) => {
    if (!event.target.matches("input.batch-pick")) return;
    toggle(event.target.closest("li.card"));
  });

  list.addEventListener("click", (event) => {
    if (event.target.matches("button.pick-run")) pickRun(event.target.closest("li.card"));
  });

  document.getElementById("batch-approve").addEventListener("click", () => decideAll("approve"));
  document.getElementById("batch-reject").addEventListener("click", () => decideAll("reject"));
  document.getElementById("batch-clear").addEventListener("click", () => {
    picked.clear();
    draw();
  });
  reasonInput.addEventListener("keydown", (event) => {
    if (event.key === "Enter") {
      event.preventDefault();
      decideAll("reject");
    }
  });

  new MutationObserver(draw).observe(list, { childList: true });
  window.DeskBatch = { size: () => picked.size, approve: () => decideAll("approve") };
  draw();
})();
