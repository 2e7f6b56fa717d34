// Device keys in this browser: an Ed25519 key pair made by WebCrypto with
// `extractable: false`, kept in IndexedDB as CryptoKey objects. Script can ask the browser
// to sign with the private key but can never read it, so it cannot leave this browser.
// Only the public key (raw, base64) and a label go to the server.
(function () {
  "use strict";
  const DB = "reviewdesk-device-keys";
  const STORE = "keys";

  function open() {
    return new Promise((resolve, reject) => {
      const request = indexedDB.open(DB, 1);
      request.onupgradeneeded = () => request.result.createObjectStore(STORE, { keyPath: "key_id" });
      request.onsuccess = () => resolve(request.result);
      request.onerror = () => reject(request.error);
    });
  }

  async function withStore(mode, work) {
    const db = await open();
    return new Promise((resolve, reject) => {
      const tx = db.transaction(STORE, mode);
      const result = work(tx.objectStore(STORE));
      tx.oncomplete = () => resolve(result.result !== undefined ? result.result : result);
      tx.onerror = () => reject(tx.error);
    });
  }

  const toB64 = (buffer) => btoa(String.fromCharCode(...new Uint8Array(buffer)));
  const fromB64 = (text) => Uint8Array.from(atob(text), (c) => c.charCodeAt(0));

  function csrfToken() {
    const field = document.querySelector("[name=csrfmiddlewaretoken]");
    return field ? field.value : "";
  }

  async function postJson(url, body) {
    const response = await fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrfToken() },
      body: JSON.stringify(body),
    });
    const data = await response.json().catch(() => ({}));
    if (!response.ok) throw new Error(data.detail || "the server refused (" + response.status + ")");
    return data;
  }

  // Make a key pair here, register its public half, keep both halves (as CryptoKeys) here.
  async function create(registerUrl, username, label) {
    const pair = await crypto.subtle.generateKey({ name: "Ed25519" }, false, ["sign", "verify"]);
    const raw = await crypto.subtle.exportKey("raw", pair.publicKey);
    const registered = await postJson(registerUrl, { label: label, public_key: toB64(raw) });
    await withStore("readwrite", (store) =>
      store.put({
        key_id: registered.key_id,
        username: username,
        label: label,
        fingerprint: registered.fingerprint,
        privateKey: pair.privateKey,
        publicKey: pair.publicKey,
      })
    );
    return registered;
  }

  async function all() {
    return withStore("readonly", (store) => store.getAll());
  }

  // The first key this browser holds for `username` among `keyIds` (or any of theirs).
  async function find(username, keyIds) {
    const keys = (await all()).filter((k) => k.username === username);
    return keys.find((k) => !keyIds || keyIds.includes(k.key_id)) || null;
  }

  async function sign(entry, bytesB64) {
    return toB64(await crypto.subtle.sign({ name: "Ed25519" }, entry.privateKey, fromB64(bytesB64)));
  }

  async function answerOf(response, refused) {
    const data = await response.json().catch(() => ({ detail: "the desk answered " + response.status + " " + response.statusText }));
    if (response.ok) return data;
    const error = new Error(data.detail || refused);
    error.code = data.code;
    throw error;
  }

  // One device-signed decision, from the approval page (approval_sign.js) or the desk's pane
  // (pane_sign.js): the exact payload bytes for `body` (a decision as the API takes it) fetched
  // from `urls.payload`, signed with `entry`, and posted with the signature to `urls.decision`.
  // Resolves to the stored decision; rejects with the desk's `detail` as message and `code`.
  async function decide(entry, urls, body) {
    const query = new URLSearchParams({ verdict: body.verdict, checkpoint_id: body.checkpoint_id, reason: body.reason, note: body.note, key_id: entry.key_id });
    ["external_ref", "answer"].forEach((name) => body[name] !== undefined && query.set(name, body[name]));
    if (body.arguments !== undefined) query.set("arguments", JSON.stringify(body.arguments));
    const fetched = await fetch(urls.payload + "?" + query, { credentials: "same-origin", headers: { Accept: "application/json" } });
    const signable = await answerOf(fetched, "the payload was refused");
    const signature = await sign(entry, signable.bytes);
    const response = await fetch(urls.decision, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRFToken": csrfToken() },
      body: JSON.stringify(Object.assign({}, body, { signature: signature, key_id: entry.key_id, payload: signable.payload })),
    });
    return answerOf(response, "the decision was refused");
  }

  window.DeskDeviceKey = { create: create, all: all, find: find, sign: sign, decide: decide, postJson: postJson, csrfToken: csrfToken };
})();
