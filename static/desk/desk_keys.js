// The desk's selection and keys: one card is the selected one (aria-current), and the keys act
// on it: j/k move, a approves (or a picked batch: batch.js), r rejects with a reason, e edits,
// o/h/g open its page, 1-9 answer a question, ? shows the keys. The clicks and focus that select
// a card. Wired by desk.js to the live queue it acts on; deciding itself is desk_decide.js's.
(function () {
  "use strict";
  const help = document.getElementById("keys-help");
  const { readAsking } = window.DeskCard;

  // Handed the queue's list, cards, notices and keys' hold (desk.js) and its deciding
  // (desk_decide.js). Installs the listeners; answers the selection, for the queue to keep when
  // it redraws, removes or settles cards.
  function wire({ list, cards, notice, keysHeld, decideWithCare, decide }) {
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

    return { selected, select, move, listHasFocus, typing };
  }

  window.DeskKeys = { wire };
})();
