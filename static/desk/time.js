// Countdowns: "in 4 min · 14:32" in the reader's time zone, amber near expiry.
(function () {
  "use strict";
  const SOON_MS = 5 * 60 * 1000;
  const relative = new Intl.RelativeTimeFormat(undefined, { numeric: "auto" });
  const clock = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit", timeZoneName: "short" });
  const full = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "long" });

  function inWords(ms) {
    const s = Math.round(ms / 1000);
    const abs = Math.abs(s);
    if (abs < 60) return relative.format(s, "second");
    if (abs < 3600) return relative.format(Math.round(s / 60), "minute");
    if (abs < 86400) return relative.format(Math.round(s / 3600), "hour");
    return relative.format(Math.round(s / 86400), "day");
  }

  // "45 s", "12 min", "3 h", "2 d": a queue row's countdown, which must share its line.
  function short(ms) {
    const s = Math.max(0, Math.round(ms / 1000));
    if (s < 60) return s + " s";
    if (s < 3600) return Math.round(s / 60) + " min";
    if (s < 86400) return Math.round(s / 3600) + " h";
    return Math.round(s / 86400) + " d";
  }

  // Fill one countdown element for an ISO instant; returns the milliseconds left.
  // `what` names the instant: "expires" (default) or "target" (the response-time target).
  // `compact`: "12 min left" (the desk's queue rows); the full instant is in its title either way.
  function show(el, iso, what, compact) {
    const at = new Date(iso);
    if (isNaN(at)) return Infinity;
    const left = at.getTime() - Date.now();
    const target = what === "target";
    const past = target ? "past target " : "expired ";
    if (compact) el.textContent = left <= 0 ? past.trim() : (target ? "target in " : "") + short(left) + (target ? "" : " left");
    else el.textContent = left <= 0 ? past + inWords(left) : (target ? "target " : "expires ") + inWords(left) + " · " + clock.format(at);
    el.title = full.format(at);
    el.classList.toggle("soon", left > 0 && left < SOON_MS);
    el.classList.toggle("gone", left <= 0);
    return left;
  }

  function localTime(iso) {
    const at = new Date(iso);
    return isNaN(at) ? iso : full.format(at);
  }

  window.DeskTime = { show, inWords, localTime };
})();
