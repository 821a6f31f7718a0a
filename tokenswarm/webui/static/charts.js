// tokenswarm live charts: polls series.json every 2 s and draws line charts on <canvas>.
// No dependencies and no network access beyond this Locust web server. Each canvas names the
// sample fields it draws (data-series) and their legend labels (data-labels): the page is
// rendered from the chart table in tokenswarm/webui/series.py, so no field is spelled here.
(function () {
  "use strict";
  var MAX_SAMPLES = 5000;
  var COLORS = ["#1f77b4", "#ff7f0e", "#d62728", "#2ca02c", "#9467bd"];
  var samples = [];
  var runId = null;
  var lastT = null;

  function fmtTime(t) {
    var d = new Date(t * 1000);
    return d.toTimeString().slice(0, 8);
  }

  // scale: the axis maximum, so small ranges (e.g. KV cache 0-0.3 %) keep enough decimals
  function fmtNum(v, scale) {
    if (v === null || v === undefined) return "-";
    var m = Math.abs(scale === undefined ? v : scale);
    if (m >= 10) return v.toFixed(0);
    if (m >= 1) return v.toFixed(1);
    return v.toFixed(2);
  }

  // Draw one chart; returns the number of points drawn (also kept in canvas.dataset.points).
  function draw(canvas, keys, labels) {
    var dpr = window.devicePixelRatio || 1;
    var w = canvas.clientWidth, h = canvas.clientHeight;
    canvas.width = Math.round(w * dpr);
    canvas.height = Math.round(h * dpr);
    var g = canvas.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, h);
    g.font = "11px system-ui, sans-serif";
    var left = 52, right = 10, top = 20, bottom = 22;
    var pw = w - left - right, ph = h - top - bottom;
    var t0 = samples.length ? samples[0].t : 0;
    var t1 = samples.length ? samples[samples.length - 1].t : 1;
    if (t1 <= t0) t1 = t0 + 1;
    var ymax = 0, have = false;
    samples.forEach(function (s) {
      keys.forEach(function (k) {
        var v = s[k];
        if (v !== null && v !== undefined) { have = true; if (v > ymax) ymax = v; }
      });
    });
    if (!have) {
      g.fillStyle = "#8a93a0";
      g.fillText(samples.length ? "not observed (the target does not export it, or no data yet)" : "waiting for data…",
        left, top + ph / 2);
      canvas.dataset.points = "0";
      return 0;
    }
    ymax = ymax > 0 ? ymax * 1.1 : 1;
    var x = function (t) { return left + (t - t0) / (t1 - t0) * pw; };
    var y = function (v) { return top + ph - v / ymax * ph; };
    // grid and axis labels
    g.strokeStyle = "#e3e6ea"; g.fillStyle = "#5b6472"; g.lineWidth = 1;
    for (var i = 0; i <= 4; i++) {
      var gv = ymax * i / 4, gy = y(gv);
      g.beginPath(); g.moveTo(left, gy); g.lineTo(left + pw, gy); g.stroke();
      g.fillText(fmtNum(gv, ymax), 4, gy + 4);
    }
    g.fillText(fmtTime(t0), left, h - 6);
    var endLabel = fmtTime(t1);
    g.fillText(endLabel, left + pw - g.measureText(endLabel).width, h - 6);
    // step changes: dashed vertical lines with the step name
    g.save(); g.setLineDash([4, 4]); g.strokeStyle = "#b8bec7";
    var prevStep = null;
    samples.forEach(function (s) {
      if (s.step && s.step !== prevStep) {
        var sx = x(s.t);
        g.beginPath(); g.moveTo(sx, top); g.lineTo(sx, top + ph); g.stroke();
        g.fillText(s.step, sx + 3, top + 10);
      }
      prevStep = s.step;
    });
    g.restore();
    // series
    var points = 0;
    keys.forEach(function (k, idx) {
      g.strokeStyle = COLORS[idx % COLORS.length]; g.lineWidth = 1.8;
      g.beginPath();
      var pen = false;
      samples.forEach(function (s) {
        var v = s[k];
        if (v === null || v === undefined) { pen = false; return; }
        var px = x(s.t), py = y(v);
        if (pen) { g.lineTo(px, py); } else { g.moveTo(px, py); pen = true; }
        points++;
      });
      g.stroke();
      // legend with the latest value
      var last = null;
      for (var j = samples.length - 1; j >= 0; j--) { if (samples[j][k] !== null && samples[j][k] !== undefined) { last = samples[j][k]; break; } }
      var lx = left + idx * 130;
      g.fillStyle = COLORS[idx % COLORS.length];
      g.fillRect(lx, 4, 10, 10);
      g.fillStyle = "#1d2430";
      g.fillText((labels[idx] || k) + " " + fmtNum(last), lx + 14, 13);
    });
    canvas.dataset.points = String(points);
    return points;
  }

  function redraw() {
    var canvases = document.querySelectorAll("canvas[data-series]");
    for (var i = 0; i < canvases.length; i++) {
      draw(canvases[i], canvases[i].dataset.series.split(","), (canvases[i].dataset.labels || "").split(","));
    }
  }

  function setStatus(data) {
    var el = document.getElementById("status");
    var last = samples.length ? samples[samples.length - 1] : null;
    var text = "run " + (data.run_id || "-") + " · " + data.state;
    if (last) {
      text += " · step " + (last.step || "-") + " " + (last.phase || "") + " · " + last.requests + " requests, " +
        last.failures + " failures · updated " + fmtTime(last.t);
    }
    el.textContent = text;
    document.body.dataset.state = data.state;
    document.body.dataset.samples = String(samples.length);
  }

  function poll() {
    var url = "series.json" + (lastT !== null ? "?since=" + encodeURIComponent(lastT) : "");
    fetch(url, { credentials: "same-origin" }).then(function (r) {
      if (!r.ok) throw new Error("HTTP " + r.status);
      return r.json();
    }).then(function (data) {
      if (data.run_id !== runId) { samples = []; lastT = null; runId = data.run_id; }
      data.samples.forEach(function (s) { if (lastT === null || s.t > lastT) samples.push(s); });
      if (samples.length) lastT = samples[samples.length - 1].t;
      if (samples.length > MAX_SAMPLES) samples = samples.slice(samples.length - MAX_SAMPLES);
      setStatus(data);
      redraw();
    }).catch(function (e) {
      document.getElementById("status").textContent = "cannot load data: " + e.message;
    }).then(function () { setTimeout(poll, 2000); });
  }

  window.addEventListener("resize", redraw);
  poll();
})();
