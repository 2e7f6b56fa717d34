// What you sign is what you see: the live pages' twin of the `visible`, `exact` and
// `shown_json` template filters (reviewdesk/desk/templatetags/desk_json.py). Format characters
// (bidi overrides and isolates, zero-width ones, the BOM, tags), controls other than newline
// and tab, the line and paragraph separators, every space but the ASCII one, and the other
// default-ignorable code points (variation selectors, Hangul fillers, ...) with the blank
// braille cell are written out as \uXXXX and flagged. `exact` and `shownJson` also write out
// the spaces at a value's edges (at its start, at its end, before a line break).
(function () {
  "use strict";
  const INVISIBLE =
    /(?![\n\t ])[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\p{Zs}\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u2065\u2800\u3164\ufe00-\ufe0f\uffa0\ufff0-\ufff8\u{e0000}-\u{e0fff}]/gu;
  const EDGE_WHITESPACE = /^[ \t]+|[ \t]+(?=[\r\n]|$)/g; // no `m`: ^ and $ are the text's ends
  const JSON_STRING = /"[^"\\]*(?:\\.[^"\\]*)*["]/g; // a string token, escapes and all
  const JSON_EDGE_SPACES = /^ +| +(?=\\[nr]|$)/g; // inside a string token; a tab is `\t` there

  // As JSON writes it (a surrogate pair above U+FFFF), so escaped JSON stays valid JSON.
  function escapeChar(c) {
    return [...Array(c.length).keys()].map((i) => "\\u" + c.charCodeAt(i).toString(16).padStart(4, "0")).join("");
  }

  function escapeAll(run) {
    return [...run].map(escapeChar).join("");
  }

  function visible(text) {
    return String(text).replace(INVISIBLE, escapeChar);
  }

  function exact(text) {
    return visible(String(text).replace(EDGE_WHITESPACE, escapeAll));
  }

  function hasInvisible(value) {
    if (typeof value === "string") {
      return new RegExp(INVISIBLE.source, "u").test(value) || new RegExp(EDGE_WHITESPACE.source).test(value);
    }
    if (Array.isArray(value)) return value.some(hasInvisible);
    if (value && typeof value === "object") {
      return Object.entries(value).some(([k, v]) => hasInvisible(k) || hasInvisible(v));
    }
    return false;
  }

  // JSON as the server's shown_json writes it (two-space indent, keys in order), escaped.
  function shownJson(value) {
    const text = String(JSON.stringify(value, null, 2));
    return visible(text.replace(JSON_STRING, (s) => '"' + s.slice(1, -1).replace(JSON_EDGE_SPACES, escapeAll) + '"'));
  }

  window.DeskShown = { visible, exact, hasInvisible, shownJson };
})();
