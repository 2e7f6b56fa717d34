// The Keys page: make a device key in this browser; an admin endorses or revokes keys,
// signing the record the server drafted with the admin's own device key held here.
(function () {
  "use strict";
  const page = document.getElementById("keys-page");
  const username = page.dataset.username;
  const status = document.getElementById("keys-status");
  const held = document.getElementById("browser-key");
  const DK = window.DeskDeviceKey;

  function say(text, kind) {
    status.textContent = text;
    status.className = "flash " + (kind || "info");
    status.hidden = false;
  }

  async function showHeld() {
    const mine = (await DK.all()).filter((k) => k.username === username);
    if (mine.length) {
      held.textContent = "This browser holds: " + mine.map((k) => k.label + " (" + k.key_id + ", fingerprint " + k.fingerprint + ")").join("; ");
      held.dataset.keyId = mine[0].key_id;
    }
  }

  const form = document.getElementById("new-key-form");
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const label = document.getElementById("key-label").value.trim();
    try {
      const key = await DK.create(page.dataset.registerUrl, username, label);
      say("Created " + key.key_id + ". Fingerprint: " + key.fingerprint + ". Read it to an admin, who endorses it.");
      setTimeout(() => location.reload(), 1500);
    } catch (error) {
      say("Could not create a key: " + error.message, "error");
    }
  });

  async function signRecord(button) {
    const signer = await DK.find(username, null);
    if (!signer) throw new Error("this browser holds no device key of yours to sign with");
    const draft = await DK.postJson(button.dataset.draftUrl, { signer_key_id: signer.key_id });
    const signature = await DK.sign(signer, draft.bytes);
    await DK.postJson(button.dataset.recordsUrl, { record: draft.record, signature: signature });
  }

  // Revoking asks first, in the page dialog (dialog.js), naming the key: whose, which, its
  // fingerprint. Without the dialog (its script did not load) nothing is revoked.
  function confirmRevoke(button) {
    if (!window.DeskDialog) {
      say("Not revoked: the confirmation did not load. Reload the page.", "error");
      return Promise.resolve(false);
    }
    const row = button.closest("tr");
    const cells = row ? row.querySelectorAll("td") : [];
    const facts = [["Key id", button.dataset.keyId]];
    if (row) {
      facts.unshift(["User", row.dataset.user || ""]);
      facts.push(["Label", cells[1] ? cells[1].textContent : ""], ["Fingerprint", row.querySelector(".fingerprint").textContent]);
    }
    return window.DeskDialog.confirm({
      title: "Revoke " + button.dataset.keyId + "?",
      lead: "Decisions it signed stop running: a worker refuses anything signed by a revoked key, whenever it was signed.",
      items: [{ name: "Device key " + button.dataset.keyId, facts: facts }],
      ok: "Revoke key",
      danger: true,
    });
  }

  page.querySelectorAll("button.endorse, button.revoke").forEach((button) => {
    button.addEventListener("click", async () => {
      const action = button.classList.contains("endorse") ? "endorse" : "revoke";
      if (action === "revoke" && !(await confirmRevoke(button))) return;
      try {
        await signRecord(button);
        say((action === "endorse" ? "Endorsed " : "Revoked ") + button.dataset.keyId + ".");
        location.reload();
      } catch (error) {
        say("Could not " + action + ": " + error.message, "error");
      }
    });
    button.disabled = false;
  });
  // The page is served with these disabled: a click before this point would have gone nowhere.
  form.querySelector("#create-key").disabled = false;

  showHeld();
})();
