// flowctl console: the review deadlines count down between the inbox's refreshes.
(function () {
  function fmt(s) {
    if (s <= 0) return "overdue";
    var d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600), m = Math.floor(s % 3600 / 60);
    if (d) return d + "d " + h + "h left";
    if (h) return h + "h " + m + "m left";
    return (m ? m + "m " : "") + Math.floor(s % 60) + "s left";
  }
  function tick() {
    document.querySelectorAll(".countdown").forEach(function (el) {
      if (!el.dataset.loaded) { el.dataset.loaded = String(Date.now() / 1000); }
      var elapsed = Date.now() / 1000 - parseFloat(el.dataset.loaded);
      el.textContent = fmt(parseFloat(el.dataset.deadline) - parseFloat(el.dataset.now) - elapsed);
    });
  }
  setInterval(tick, 1000);
})();
