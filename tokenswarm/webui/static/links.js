// Injected into Locust's page by tokenswarm: a small fixed bar linking the LLM charts, the
// LLM table's CSV and the run report (enabled once the run has ended).
(function () {
  "use strict";
  var bar = document.createElement("div");
  bar.id = "tokenswarm-links";
  bar.style.cssText = "position:fixed;right:12px;bottom:12px;z-index:2000;background:#1d2430;color:#fff;" +
    "font:13px system-ui,sans-serif;padding:6px 10px;border-radius:6px;box-shadow:0 2px 6px rgba(0,0,0,.3)";
  var linkStyle = "color:#9fd3ff;margin-left:8px";
  bar.innerHTML = '<b>LLM</b>' +
    '<a id="tokenswarm-charts-link" style="' + linkStyle + '" href="./tokenswarm/charts" target="_blank">live charts</a>' +
    '<a id="tokenswarm-csv-link" style="' + linkStyle + '" href="./tokenswarm/llm.csv">CSV</a>' +
    '<a id="tokenswarm-report-link" style="' + linkStyle + ';opacity:.5" href="./tokenswarm/report/" target="_blank"' +
    ' title="available when the run ends">report</a>' +
    '<span id="tokenswarm-credentials" style="margin-left:10px;opacity:.8"></span>';
  document.body.appendChild(bar);

  // Locust's page stops polling its statistics when a run stops, before tokenswarm has the
  // last records (in-flight streams, workers' final batches). Offer a reload once it has them.
  var sawRunning = false;
  function refresh() {
    fetch("./tokenswarm/status.json", { credentials: "same-origin" }).then(function (r) {
      return r.ok ? r.json() : null;
    }).then(function (st) {
      if (!st) return;
      // which host gets the target's credentials (a host typed in the start form gets none)
      document.getElementById("tokenswarm-credentials").textContent =
        "credentials to: " + (st.credentials_to || "no host");
      var a = document.getElementById("tokenswarm-report-link");
      var ready = st.state === "finished";
      a.style.opacity = ready ? "1" : ".5";
      a.title = ready ? "report of " + st.run_dir : "available when the run ends";
      if (st.state === "running" || st.state === "stopping") sawRunning = true;
      if (ready && sawRunning && !document.getElementById("tokenswarm-final-link")) {
        var f = document.createElement("a");
        f.id = "tokenswarm-final-link";
        f.href = window.location.href;
        f.style.cssText = linkStyle + ";font-weight:bold";
        f.textContent = "run ended: reload for final numbers";
        bar.appendChild(f);
      }
    }).catch(function () {}).then(function () { setTimeout(refresh, 2000); });
  }
  refresh();
})();
