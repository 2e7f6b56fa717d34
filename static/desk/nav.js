// The navigation on a phone: folded behind "Menu" (desk.css shows it whole on wider screens),
// and the desk's filters behind "Filters". One job: a button that opens what it controls.
(function () {
  "use strict";
  document.querySelectorAll("#nav-toggle, #filters-toggle").forEach((button) => {
    const target = document.getElementById(button.getAttribute("aria-controls"));
    if (!target) return;
    button.addEventListener("click", () => {
      const open = button.getAttribute("aria-expanded") !== "true";
      button.setAttribute("aria-expanded", String(open));
      target.dataset.open = open ? "yes" : "";
    });
  });
})();
