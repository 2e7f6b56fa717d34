// The desk's confirmation: a page dialog (templates/desk/_confirm.html) that states the facts
// of what is about to be signed, one entry per call, its warnings in red. It answers a promise:
// true only for the confirming button. Esc, Cancel or closing it any other way: false.
// Where a warning is listed the focus starts on Cancel, so Enter alone never signs the unusual.
(function () {
  "use strict";
  const dialog = document.getElementById("confirm");
  if (!dialog) return;
  const title = document.getElementById("confirm-title");
  const lead = document.getElementById("confirm-lead");
  const items = document.getElementById("confirm-items");
  const ok = document.getElementById("confirm-ok");
  const cancel = document.getElementById("confirm-cancel");
  let answer = null;

  // One call: its name (tool and agent), its key facts as "label: value", its warnings.
  function entry(item) {
    const li = document.createElement("li");
    const name = document.createElement("strong");
    name.textContent = item.name;
    li.append(name);
    if (item.facts && item.facts.length) {
      const dl = document.createElement("dl");
      dl.className = "facts";
      item.facts.forEach(([label, value]) => {
        const dt = document.createElement("dt");
        dt.textContent = label;
        const dd = document.createElement("dd");
        dd.textContent = value;
        dl.append(dt, dd);
      });
      li.append(dl);
    }
    if (item.body) {
      const pre = document.createElement("pre");
      pre.className = "body-lines";
      pre.textContent = item.body;
      li.append(pre);
    }
    (item.warnings || []).forEach((w) => {
      const p = document.createElement("p");
      p.className = "warning";
      p.textContent = "⚠ " + w;
      li.append(p);
    });
    return li;
  }

  // {title, lead, items: [{name, facts, body, warnings}], ok: the confirming button's words,
  //  danger: true for a destructive confirmation (its button red, not the approving green)}
  function confirm(spec) {
    if (answer) answer(false);
    title.textContent = spec.title;
    lead.textContent = spec.lead || "";
    items.replaceChildren(...(spec.items || []).map(entry));
    ok.textContent = spec.ok || "Approve";
    ok.classList.toggle("danger", !!spec.danger);
    const warned = (spec.items || []).some((i) => i.warnings && i.warnings.length);
    dialog.dataset.warned = warned ? "yes" : "";
    dialog.returnValue = "";
    dialog.showModal();
    (warned ? cancel : ok).focus();
    return new Promise((resolve) => {
      answer = resolve;
    });
  }

  // The close event is queued, not fired at once: a confirmation asked again straight after one
  // was closed (Esc, then `a`) is open when the first one's event arrives. That stale event
  // answered the new question "no" while its dialog stayed up, and its Approve then did nothing.
  dialog.addEventListener("close", () => {
    if (dialog.open) return;
    const resolve = answer;
    answer = null;
    if (resolve) resolve(dialog.returnValue === "ok");
  });

  window.DeskDialog = { confirm, isOpen: () => dialog.open };
})();
