// Copy buttons beside shortened ids (templatetags/desk_ids.py): a click, or Enter or Space on
// the focused button, puts the whole id on the clipboard and says so on the button for a moment.
(function () {
  "use strict";
  function copied(button, ok) {
    const label = button.getAttribute("aria-label");
    button.dataset.copied = ok ? "yes" : "no";
    button.setAttribute("aria-label", ok ? "Copied" : "Not copied: select the id and copy it");
    setTimeout(() => {
      button.setAttribute("aria-label", label);
      delete button.dataset.copied;
    }, 1500);
  }
  // Without the clipboard API (a page over plain http, not localhost): a hidden field's text.
  function fallback(text) {
    const field = document.createElement("textarea");
    field.value = text;
    field.setAttribute("readonly", "");
    field.style.position = "fixed";
    field.style.opacity = "0";
    document.body.appendChild(field);
    field.select();
    const ok = document.execCommand("copy");
    field.remove();
    return ok;
  }
  document.addEventListener("click", (event) => {
    const button = event.target.closest("button.copy-id");
    if (!button) return;
    event.preventDefault();
    const text = button.dataset.copy;
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(
        () => copied(button, true),
        () => copied(button, fallback(text))
      );
    } else {
      copied(button, fallback(text));
    }
  });
})();
