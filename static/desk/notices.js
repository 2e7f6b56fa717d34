// The page's notices (base.html): they float over the page, so that they never push it down;
// × dismisses them, Escape too while they hold focus, and good news goes by itself after a while.
(function () {
  "use strict";
  const box = document.getElementById("page-notices");
  if (!box) return;
  const GOOD_NEWS_MS = 8000;
  const close = () => box.remove();
  document.getElementById("notices-close").addEventListener("click", close);
  box.addEventListener("keydown", (event) => {
    if (event.key === "Escape") close();
  });
  // Only when every notice is good news: a refusal or a warning waits to be read and dismissed.
  const onlyGood = Array.from(box.querySelectorAll(".flash")).every((p) => p.matches(".success, .info"));
  if (onlyGood) setTimeout(() => box.classList.add("fading"), GOOD_NEWS_MS);
  box.addEventListener("transitionend", () => box.classList.contains("fading") && close());
})();
