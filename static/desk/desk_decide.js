// Deciding in place on the desk: a card's button (or a key: desk_keys.js) posts its decision
// to the approval's page as JSON, asking first only when the server's summary says something is
// unusual (dialog.js); a device-signed tool is signed by this browser's key (pane_sign.js). A
// decided card is settled by the queue (desk.js); a refusal is said, and its buttons come back
// unless no retry can change it. Wired by desk.js, which hands batch.js and edit.js `post`.
(function () {
  "use strict";

  // Handed the queue's parts a decision touches (desk.js): the list, its notices, the ids this
  // page decided (no "decided by" notice for those), and settle (a decided card leaves). Installs
  // the submit listener; answers deciding, and post, facts and parsed for batch.js and edit.js.
  function wire({ list, notice, decidedHere, settle }) {
    // A button decides in place (Enter in a field is handled with the keys: desk_keys.js).
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

    return { decideWithCare, decide, post, facts, parsed };
  }

  window.DeskDecide = { wire };
})();
