// The desk's editor (`e`): a form built from the tool's JSON Schema, field by field (text: an
// input or, for long or multi-line text, a textarea; number: a number input; boolean: a
// checkbox; enum: a select; anything else: its JSON), with the whole JSON as an advanced view.
// The caret lands in the first field, so typing never reaches the desk's keys. An edit that
// changes nothing is refused here ("No changes: use Approve") and by the server (422 unchanged).
// Signed as one decision (verdict "edit") through desk_decide.js's post (window.DeskQueue), like Approve.
(function () {
  "use strict";
  const queue = window.DeskQueue;
  const schemasNode = document.getElementById("tool-schemas");
  if (!queue || !schemasNode) return;
  const schemas = JSON.parse(schemasNode.textContent || "{}");
  const LONG_TEXT = 80;

  // An external call carries its framework's schema (data-schema); a desk call, its tool's.
  function schemaOf(node) {
    if (node.dataset.schema) return JSON.parse(node.dataset.schema);
    return ((schemas[node.dataset.agent] || {})[node.dataset.tool]) || {};
  }

  // Keys sorted at every depth: two arguments are the same call when these are equal.
  function canonical(value) {
    if (Array.isArray(value)) return "[" + value.map(canonical).join(",") + "]";
    if (value && typeof value === "object") {
      return "{" + Object.keys(value).sort().map((k) => JSON.stringify(k) + ":" + canonical(value[k])).join(",") + "}";
    }
    return JSON.stringify(value);
  }

  function kindOf(schema) {
    if (Array.isArray(schema.enum) && schema.enum.every((v) => typeof v === "string")) return "enum";
    const type = Array.isArray(schema.type) ? schema.type[0] : schema.type;
    if (["string", "number", "integer", "boolean"].includes(type)) return type;
    return "json";
  }

  let serial = 0;

  // One field: a label and its control, data-name and data-kind say how to read it back.
  function field(name, schema, value) {
    const kind = kindOf(schema || {});
    const id = "edit-" + ++serial;
    const wrap = document.createElement("p");
    wrap.className = "edit-field";
    const label = document.createElement("label");
    label.htmlFor = id;
    label.textContent = name;
    let control;
    if (kind === "enum") {
      control = document.createElement("select");
      schema.enum.forEach((choice) => control.append(new Option(choice, choice, false, choice === value)));
    } else if (kind === "boolean") {
      control = document.createElement("input");
      control.type = "checkbox";
      control.checked = value === true;
    } else if (kind === "number" || kind === "integer") {
      control = document.createElement("input");
      control.type = "number";
      control.step = kind === "integer" ? "1" : "any";
      control.value = value === undefined ? "" : String(value);
    } else if (kind === "string" && (typeof value !== "string" || (!value.includes("\n") && value.length <= LONG_TEXT && !(schema.maxLength > 200)))) {
      control = document.createElement("input");
      control.type = "text";
      control.value = value === undefined ? "" : value;
    } else {
      control = document.createElement("textarea");
      control.rows = kind === "string" ? Math.min(10, Math.max(3, String(value || "").split("\n").length + 1)) : 4;
      control.value = kind === "string" ? value || "" : JSON.stringify(value === undefined ? null : value, null, 2);
    }
    control.id = id;
    Object.assign(control.dataset, { name, kind });
    if (kind === "boolean") wrap.append(control, " ", label);
    else wrap.append(label, control);
    return wrap;
  }

  function readField(control) {
    const kind = control.dataset.kind;
    if (kind === "boolean") return control.checked;
    if (kind === "number" || kind === "integer") return control.value === "" ? undefined : Number(control.value);
    if (kind === "json") return JSON.parse(control.value);
    return control.value;
  }

  function close(node) {
    const form = node.querySelector("form.edit-form");
    if (form) form.remove();
    delete node.dataset.editing;
  }

  function open(node) {
    let form = node.querySelector("form.edit-form");
    if (form) {
      form.querySelector("[data-name], textarea.json-all").focus();
      return;
    }
    const original = queue.parsed(node.dataset.arguments, {});
    const schema = schemaOf(node);
    const properties = schema.properties || {};
    const names = [...new Set([...Object.keys(properties), ...Object.keys(original)])];
    form = document.createElement("form");
    form.className = "edit-form";
    form.setAttribute("aria-label", "Edit the arguments of " + node.dataset.tool);
    const heading = document.createElement("h2");
    heading.textContent = "Edit " + node.dataset.tool + ": change what is wrong, then sign";
    form.append(heading);
    names.forEach((name) => form.append(field(name, properties[name] || {}, original[name])));
    const advanced = document.createElement("details");
    advanced.className = "json-view";
    const summary = document.createElement("summary");
    summary.textContent = "Advanced: the arguments as JSON";
    const json = document.createElement("textarea");
    json.className = "json-all";
    json.rows = 6;
    json.spellcheck = false;
    json.setAttribute("aria-label", "The arguments as JSON");
    json.value = JSON.stringify(original, null, 2);
    advanced.append(summary, json);
    const reason = document.createElement("input");
    Object.assign(reason, { name: "edit-reason", placeholder: "Why (sent to the agent)", maxLength: 2000 });
    reason.setAttribute("aria-label", "Why you edited it");
    const problems = document.createElement("p");
    problems.className = "edit-problems warning";
    problems.setAttribute("role", "alert");
    const buttons = document.createElement("p");
    buttons.className = "buttons";
    const sign = document.createElement("button");
    sign.type = "submit";
    sign.className = "approve";
    sign.textContent = "Sign the edit";
    const cancel = document.createElement("button");
    cancel.type = "button";
    cancel.className = "cancel";
    cancel.textContent = "Cancel (Esc)";
    buttons.append(sign, cancel);
    form.append(advanced, reason, problems, buttons);
    node.querySelector("form.decide.tool-call").after(form);
    node.dataset.editing = "yes";

    // The JSON view, once typed in, is what is signed; until then the fields are.
    json.addEventListener("input", () => (json.dataset.typed = "yes"));
    // The card the editor is in now: desk_card.js's carryOver moves it into a card drawn again (a push, a snapshot).
    const here = () => form.closest("li.card") || node;
    cancel.addEventListener("click", () => {
      const current = here();
      close(current);
      queue.select(current);
    });
    form.addEventListener("keydown", (event) => {
      if (event.key === "Escape") {
        event.preventDefault();
        const current = here();
        close(current);
        queue.select(current);
      }
    });
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      submit(here(), form, original, schema);
    });
    const first = form.querySelector("[data-name]") || json;
    first.focus();
    if (first.setSelectionRange && typeof first.value === "string" && first.type !== "number") {
      first.setSelectionRange(first.value.length, first.value.length);
    }
  }

  function edited(form) {
    const json = form.querySelector("textarea.json-all");
    if (json.dataset.typed) return JSON.parse(json.value);
    const out = {};
    form.querySelectorAll("[data-name]").forEach((control) => {
      const value = readField(control);
      if (value !== undefined) out[control.dataset.name] = value;
    });
    return out;
  }

  async function submit(node, form, original, schema) {
    const problems = form.querySelector(".edit-problems");
    let args;
    try {
      args = edited(form);
    } catch (error) {
      problems.textContent = "Not JSON: " + error.message;
      return;
    }
    if (canonical(args) === canonical(original)) {
      problems.textContent = "No changes: use Approve";
      return;
    }
    const errors = window.DeskSchema ? window.DeskSchema.errors(schema, args) : [];
    if (errors.length) {
      problems.textContent = errors.join("; ");
      return;
    }
    problems.textContent = "";
    const decideForm = node.querySelector("form.decide.tool-call");
    const body = new FormData(decideForm);
    body.set("verdict", "edit");
    body.set("arguments", JSON.stringify(args));
    body.set("reason", form.querySelector("[name=edit-reason]").value);
    form.querySelectorAll("button").forEach((b) => (b.disabled = true));
    const answer = await queue.post(node, decideForm.action, body);
    if (answer.decided) {
      queue.notice(answer.detail, "success");
      queue.settle(node, { focus: true });
    } else {
      problems.textContent = answer.detail;
      form.querySelectorAll("button").forEach((b) => (b.disabled = false));
    }
  }

  document.addEventListener("click", (event) => {
    const button = event.target.closest("button.edit-open");
    if (button) open(button.closest("li.card"));
  });

  window.DeskEdit = { open, close, canonical };
})();
