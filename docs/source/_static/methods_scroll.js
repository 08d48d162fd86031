// A table wider than its column scrolls inside its frame (furo's .table-wrapper, the
// composability page's .ml-matrix). Where one does, a line above it says so, and the side that
// has more fades out (methods_overview.css); both follow the frame's scrolling and the window's width.
(function () {
  "use strict";
  var FRAMES = ".table-wrapper, .ml-matrix";

  function update(frame) {
    var overflows = frame.scrollWidth - frame.clientWidth > 1;
    var hint = frame.previousElementSibling;
    if (!(hint && hint.classList.contains("ml-scroll-hint"))) {
      if (!overflows) return;
      hint = document.createElement("p");
      hint.className = "ml-scroll-hint";
      hint.setAttribute("aria-hidden", "true"); // what it says, a screen reader's table navigation already gives
      hint.textContent = "Scroll sideways for more \u2192";
      frame.parentNode.insertBefore(hint, frame);
    }
    hint.hidden = !overflows;
    frame.classList.toggle("ml-scrolls", overflows);
    frame.classList.toggle("ml-more-left", overflows && frame.scrollLeft > 1);
    frame.classList.toggle("ml-more-right", overflows && frame.scrollLeft + frame.clientWidth < frame.scrollWidth - 1);
  }

  function updateAll() {
    document.querySelectorAll(FRAMES).forEach(update);
  }

  function start() {
    document.querySelectorAll(FRAMES).forEach(function (frame) {
      frame.addEventListener("scroll", function () { update(frame); }, { passive: true });
    });
    window.addEventListener("resize", updateAll);
    document.addEventListener("toggle", updateAll, true); // a dropdown that opens shows its tables
    updateAll();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
