// Device-signed decisions on the approval page. When this browser holds one of
// the reviewer's endorsed device keys, a decision is not posted as a form: the page fetches
// the exact payload bytes (/api/v1/approvals/{id}/payload), signs them with the key here,
// and posts the decision with signature, key_id and payload. The server checks the signature
// before storing; the worker checks it again against the key's endorsement before the tool runs.
(function () {
  "use strict";
  const page = document.getElementById("approval");
  const endorsed = (page.dataset.deviceKeys || "").split(" ").filter(Boolean);
  const notice = document.getElementById("device-signing");
  if (!endorsed.length) return; // approval.js enabled the decision buttons: the server signs
  // Otherwise the buttons wait (disabled) for this script to know who signs: see approval.js.
  const arm = () => window.DeskApproval && window.DeskApproval.armDecisions();
  const LOOKUP_TIMEOUT_MS = 3000;
  if (!window.crypto || !crypto.subtle || !notice || !window.DeskDeviceKey) {
    arm(); // this browser cannot sign here (or devicekey.js did not load): the server does
    return;
  }

  function fields(form, verdict) {
    const data = new FormData(form);
    const out = { verdict: verdict, checkpoint_id: data.get("checkpoint_id"), reason: data.get("reason") || "", note: data.get("note") || "" };
    if (data.has("external_ref")) out.external_ref = data.get("external_ref");
    if (verdict === "edit") out.arguments = JSON.parse(data.get("arguments"));
    if (verdict === "approve" && data.get("grant") === "on") out.grant = grantOf(data);
    return out;
  }

  // "Always allow…" as the API's `grant` object, as the desk's form post builds it
  // (desk/views/grants.posted_grant): the decision is device-signed, the grant server-signed.
  function grantOf(data) {
    const grant = { scope: data.get("grant_scope") || "" };
    if (data.get("grant_match") === "constraints") grant.match = JSON.parse(data.get("grant_constraints") || "");
    const hours = Number(data.get("grant_hours") || "24");
    grant.max_uses = Number(data.get("grant_max_uses"));
    grant.expires_at = new Date(Date.now() + hours * 3600 * 1000).toISOString();
    return grant;
  }

  function decide(entry, body) {
    return window.DeskDeviceKey.decide(entry, { payload: page.dataset.payloadUrl, decision: page.dataset.decisionUrl }, body);
  }

  const found = window.DeskDeviceKey.find(page.dataset.username, endorsed).then((entry) => {
    if (!entry) return;
    notice.textContent = "Decisions here are signed by this browser's device key " + entry.key_id + " (" + entry.label + ").";
    notice.hidden = false;
    page.dataset.signer = "device";
    ["decide-form", "edit-form", "reconcile-form"].forEach((id) => {
      const form = document.getElementById(id);
      if (!form) return;
      form.addEventListener("submit", async (event) => {
        if (event.defaultPrevented || !event.submitter) return; // not confirmed, or not reviewed yet
        event.preventDefault();
        try {
          await decide(entry, fields(form, event.submitter.value));
          location.reload();
        } catch (error) {
          notice.textContent = "Not decided: " + error.message;
          notice.className = "flash error";
        }
      });
    });
  });
  // Found or not (or no IndexedDB here), the signer is settled: a click now signs as it should.
  let settled = false;
  found.catch(() => {}).finally(() => {
    settled = true;
    arm();
  });
  // A key store that never answers (a hung IndexedDB open) must not leave the page without
  // buttons: say who signs, and arm. Should the lookup answer later, its key signs from then on.
  setTimeout(() => {
    if (settled || page.dataset.status !== "pending") return;
    notice.textContent = "This browser's key store did not answer: decisions here are signed by the server.";
    notice.hidden = false;
    arm();
  }, LOOKUP_TIMEOUT_MS);
})();
