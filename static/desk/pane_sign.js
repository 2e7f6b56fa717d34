// Device-signed decisions from the desk's pane. A tool that runs only on a decision signed by
// the reviewer's own device key (the card's data-device-key) is decided here as on its page
// (approval_sign.js): the exact payload bytes are fetched (/api/v1/approvals/{id}/payload),
// signed by the key this browser holds (devicekey.js: the private key never leaves it), and
// the decision is posted with its signature. desk_decide.js's post() hands such decisions here, so
// Approve, `a`, an edit and a batch all sign the same way; a rejection needs no device key.
(function () {
  "use strict";
  const list = document.getElementById("approvals");
  if (!list) return;
  const endorsed = (list.dataset.deviceKeys || "").split(" ").filter(Boolean);
  // The verdicts the server checks the signer of (approvals/deciding/record.py SIGNER_CHECKED_VERDICTS).
  const SIGNED = ["approve", "edit", "rerun", "answer"];
  const LOOKUP_TIMEOUT_MS = 3000;
  const canSign = endorsed.length && window.crypto && crypto.subtle && window.DeskDeviceKey;
  let entry = null;
  let settled = false;
  const lookup = canSign
    ? window.DeskDeviceKey.find(list.dataset.username, endorsed).then((found) => (entry = found)).catch(() => null)
    : Promise.resolve(null);
  lookup.finally(() => {
    settled = true;
    list.querySelectorAll("li.card").forEach(describe);
  });

  function urlFor(pattern, id) {
    return pattern.replace(list.dataset.placeholder, encodeURIComponent(id));
  }

  // The card says who will sign, once the lookup has answered: this browser's key, or why not.
  function describe(node) {
    const note = node.querySelector(".device-note");
    if (!note || !settled) return;
    if (entry) note.textContent = "Signed with this browser's device key " + entry.key_id + " (" + entry.label + ").";
    else note.textContent = missing(node.dataset.tool);
  }

  function missing(tool) {
    const why = endorsed.length ? "this browser holds none of your endorsed device keys" : "you have no endorsed device key yet";
    return tool + " runs only on a decision signed by your own device key, and " + why + ": enrol one on Keys (/keys/) and have an admin endorse it, or decide from the browser that holds it.";
  }

  function needed(node, body) {
    return node.dataset.deviceKey === "yes" && SIGNED.includes(String(body.get("verdict")));
  }

  async function settledEntry() {
    const late = new Promise((resolve) => setTimeout(resolve, LOOKUP_TIMEOUT_MS));
    await Promise.race([lookup, late]);
    return entry;
  }

  function fields(body) {
    const out = {
      verdict: String(body.get("verdict")),
      checkpoint_id: String(body.get("checkpoint_id")),
      reason: String(body.get("reason") || ""),
      note: String(body.get("note") || ""),
    };
    if (body.has("external_ref")) out.external_ref = String(body.get("external_ref"));
    if (body.has("answer")) out.answer = String(body.get("answer"));
    if (out.verdict === "edit") out.arguments = JSON.parse(String(body.get("arguments")));
    return out;
  }

  // One device-signed decision: {decided, detail, code?}, as desk_decide.js's post() answers.
  async function decide(node, body) {
    const key = await settledEntry();
    if (!key) return { decided: false, detail: "Not decided: " + missing(node.dataset.tool), code: "device_signature_required" };
    const id = node.dataset.approvalId;
    const decision = fields(body);
    try {
      await window.DeskDeviceKey.decide(key, { payload: urlFor(list.dataset.payloadUrl, id), decision: urlFor(list.dataset.decisionUrl, id) }, decision);
    } catch (error) {
      return { decided: false, detail: "Not decided: " + error.message, code: error.code };
    }
    const verb = { approve: "Approved", edit: "Approved as edited", rerun: "Re-run", answer: "Answered" }[decision.verdict] || "Decided";
    return { decided: true, detail: verb + ": " + node.dataset.tool + ", signed by this browser's device key " + key.key_id + "." };
  }

  window.DeskPaneSign = { needed, decide, describe };
})();
