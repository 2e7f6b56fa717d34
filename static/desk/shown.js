// What you sign is what you see: the live pages' twin of the `visible` template filter
// (reviewdesk/desk/templatetags/desk_json.py). Format characters (bidi overrides and
// isolates, zero-width ones, the BOM), controls other than newline and tab, and the line
// and paragraph separators are written out as \uXXXX and flagged.
(function () {
  "use strict";
  const INVISIBLE = /(?![\n\t])[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/gu;

  // As JSON writes it (a surrogate pair above U+FFFF), so escaped JSON stays valid JSON.
  function escapeChar(c) {
    return [...Array(c.length).keys()].map((i) => "\\u" + c.charCodeAt(i).toString(16).padStart(4, "0")).join("");
  }

  function visible(text) {
    return String(text).replace(INVISIBLE, escapeChar);
  }

  function hasInvisible(value) {
    if (typeof value === "string") return new RegExp(INVISIBLE.source, "u").test(value);
    if (Array.isArray(value)) return value.some(hasInvisible);
    if (value && typeof value === "object") {
      return Object.entries(value).some(([k, v]) => hasInvisible(k) || hasInvisible(v));
    }
    return false;
  }

  // JSON as the server's pretty_json writes it (two-space indent, keys in order), escaped.
  function shownJson(value) {
    return visible(JSON.stringify(value, null, 2));
  }

  window.DeskShown = { visible, hasInvisible, shownJson };
})();
