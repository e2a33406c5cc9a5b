// The book opened from the file system (site/index.html): mkdocs-material's search runs in a web worker, which a
// browser does not start from file:// pages, so the search box would say "Initializing search" for ever. There it
// says instead the one command that serves the book, where search works.
(function () {
  if (location.protocol !== "file:") return;
  var SERVE = "Search needs the book served: python -m http.server -d site, then open http://localhost:8000";
  function tell() {
    var input = document.querySelector(".md-search__input");
    if (input && input.placeholder !== "Search: serve the book (see below)") {
      input.placeholder = "Search: serve the book (see below)";
      input.title = SERVE;
    }
    document.querySelectorAll(".md-search-result__meta").forEach(function (meta) {
      if (meta.textContent !== SERVE) meta.textContent = SERVE;
    });
  }
  document.addEventListener("DOMContentLoaded", function () {
    tell();
    new MutationObserver(tell).observe(document.body, { childList: true, subtree: true, characterData: true });
  });
})();
