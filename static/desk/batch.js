// Batch deciding on the desk: pick several pending tool calls (x, shift-A for "all similar",
// "Select all of this run"), then approve them, or reject them with one reason, in one go.
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

  function argumentsOf(node) {
    try {
      const value = JSON.parse(node.dataset.arguments || "null");
      return value && typeof value === "object" && !Array.isArray(value) ? value : { "": value };
    } catch (error) {
      return {};
    }
  }

  // The fields of a card's arguments whose values differ from the first picked card's.
  function differing(node, reference) {
    const mine = argumentsOf(node);
    const theirs = argumentsOf(reference);
    const keys = [...new Set([...Object.keys(theirs), ...Object.keys(mine)])];
    return keys.filter((k) => JSON.stringify(mine[k]) !== JSON.stringify(theirs[k]));
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

  // The current card first, so the others are compared with it.
  function pickSimilar(node) {
    if (!selectable(node)) return;
    picked.add(node.dataset.approvalId);
    pickAll((c) => c.dataset.tool === node.dataset.tool);
  }

  function pickRun(node) {
    if (!selectable(node)) return;
    picked.add(node.dataset.approvalId);
    pickAll((c) => c.dataset.run === node.dataset.run);
  }

  // One confirmation lists every irreversible call before any is approved.
  function confirmed(nodes, verdict) {
    if (verdict !== "approve") return true;
    const risky = nodes.filter((n) => n.dataset.effect === "external");
    if (!risky.length) return true;
    const lines = risky.map((n) => "• " + label(n)).join("\n");
    return window.confirm(
      "These act outside the desk and cannot be undone:\n" + lines + "\n\nApprove all " + nodes.length + "?"
    );
  }

  async function decideAll(which) {
    if (deciding) return;
    const nodes = [...picked].map(byId).filter(selectable);
    if (!nodes.length) return;
    const verdict = nodes[0].querySelector("form.decide.tool-call button." + which).value;
    if (!confirmed(nodes, verdict)) return;
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
    if (typing(event.target) || (help && help.open)) return;
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
  draw();
})();
