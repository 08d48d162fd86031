// Names for the theme's two sidebars (furo writes them as unnamed <aside> landmarks), so a screen
// reader's list of landmarks tells them apart.
(function () {
  "use strict";
  function name() {
    var names = [[".sidebar-drawer", "Site navigation"], [".toc-drawer", "On this page"]];
    names.forEach(function (pair) {
      var element = document.querySelector(pair[0]);
      if (element && !element.hasAttribute("aria-label")) element.setAttribute("aria-label", pair[1]);
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", name);
  else name();
})();
