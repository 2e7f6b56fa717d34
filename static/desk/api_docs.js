// The API page: list the OpenAPI document's operations (no inline script: CSP).
(function () {
  "use strict";
  const list = document.getElementById("paths");
  fetch(list.dataset.schemaUrl)
    .then((r) => r.json())
    .then((schema) => {
      for (const [path, ops] of Object.entries(schema.paths || {})) {
        for (const method of Object.keys(ops)) {
          const li = document.createElement("li");
          li.textContent = method.toUpperCase() + " " + path;
          list.appendChild(li);
        }
      }
    });
})();
