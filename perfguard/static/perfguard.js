/* perfguard report pages: hover read-outs on charts and table filters.
 *
 * The pages are complete without this file: charts are server-drawn SVG and tables are plain HTML.
 * Data comes from <script type="application/json"> blocks in the page (never fetched: the pages
 * must work from file://), and every text is written with textContent, never as HTML, because
 * benchmark names and commit subjects are user-controlled.
 */
(function () {
  "use strict";

  function readJSON(id) {
    var node = document.getElementById(id);
    return node ? JSON.parse(node.textContent) : null;
  }

  /* Index of the value in sorted `xs` closest to `x`. */
  function nearest(xs, x) {
    var lo = 0, hi = xs.length - 1;
    while (hi - lo > 1) {
      var mid = (lo + hi) >> 1;
      if (xs[mid] < x) { lo = mid; } else { hi = mid; }
    }
    return Math.abs(xs[lo] - x) <= Math.abs(xs[hi] - x) ? lo : hi;
  }

  function svgPoint(svg, evt) {
    var pt = svg.createSVGPoint();
    pt.x = evt.clientX;
    pt.y = evt.clientY;
    var ctm = svg.getScreenCTM();
    return ctm ? pt.matrixTransform(ctm.inverse()) : pt;
  }

  function setLines(tip, lines) {
    while (tip.firstChild) { tip.removeChild(tip.firstChild); }
    lines.forEach(function (line, k) {
      var div = document.createElement("div");
      div.className = k === 0 ? "tip-title" : "tip-line";
      div.textContent = line;
      tip.appendChild(div);
    });
  }

  function place(tip, figure, evt) {
    var box = figure.getBoundingClientRect();
    var left = evt.clientX - box.left + 14;
    var top = evt.clientY - box.top + 14;
    tip.hidden = false;
    if (left + tip.offsetWidth > box.width) { left = Math.max(0, evt.clientX - box.left - tip.offsetWidth - 14); }
    if (top + tip.offsetHeight > box.height) { top = Math.max(0, evt.clientY - box.top - tip.offsetHeight - 14); }
    tip.style.left = left + "px";
    tip.style.top = top + "px";
  }

  /* Series over commits: a crosshair snaps to the nearest commit and the tooltip reads it out. */
  function lineChart(figure) {
    var svg = figure.querySelector("svg.line-chart");
    var data = readJSON(figure.getAttribute("data-points"));
    var tip = figure.querySelector(".tip");
    if (!svg || !data || !tip || !data.x.length) { return; }
    var cross = svg.querySelector(".crosshair");
    var focus = svg.querySelector(".focus");
    function show(evt) {
      var p = svgPoint(svg, evt);
      var i = nearest(data.x, p.x);
      cross.setAttribute("x1", data.x[i]);
      cross.setAttribute("x2", data.x[i]);
      focus.setAttribute("cx", data.x[i]);
      focus.setAttribute("cy", data.y[i]);
      cross.removeAttribute("visibility");
      focus.removeAttribute("visibility");
      var lines = [data.sha[i] + "  " + data.subject[i], data.date[i], "value " + data.value[i], "CI " + data.ci[i]];
      if (data.marks[i]) { lines.push(data.marks[i]); }
      setLines(tip, lines);
      place(tip, figure, evt);
    }
    function hide() {
      tip.hidden = true;
      cross.setAttribute("visibility", "hidden");
      focus.setAttribute("visibility", "hidden");
    }
    svg.addEventListener("pointermove", show);
    svg.addEventListener("pointerdown", show);
    svg.addEventListener("pointerleave", hide);
  }

  /* Anything with data-tip (points of the scaling charts) shows it in the figure's tooltip. */
  function pointTips(figure) {
    var tip = figure.querySelector(".tip");
    if (!tip) { return; }
    figure.querySelectorAll("[data-tip]").forEach(function (el) {
      el.addEventListener("pointerenter", function (evt) {
        setLines(tip, el.getAttribute("data-tip").split("\n"));
        place(tip, figure, evt);
      });
      el.addEventListener("pointerleave", function () { tip.hidden = true; });
    });
  }

  /* Table rows: a text filter and a "only what changed" switch (rows with class "quiet"). */
  function tableFilters() {
    var tables = {};
    document.querySelectorAll("[data-filter-target]").forEach(function (ctl) {
      var id = ctl.getAttribute("data-filter-target");
      (tables[id] = tables[id] || []).push(ctl);
    });
    Object.keys(tables).forEach(function (id) {
      var table = document.getElementById(id);
      if (!table) { return; }
      var controls = tables[id];
      function apply() {
        var text = "", onlyChanged = false;
        controls.forEach(function (c) {
          if (c.type === "checkbox") { onlyChanged = c.checked; } else { text = c.value.toLowerCase(); }
        });
        table.querySelectorAll("tbody tr").forEach(function (row) {
          var hide = (onlyChanged && row.classList.contains("quiet")) ||
            (text && row.textContent.toLowerCase().indexOf(text) < 0);
          row.hidden = hide;
        });
      }
      controls.forEach(function (c) { c.addEventListener("input", apply); c.addEventListener("change", apply); });
      apply();
    });
  }

  /* Secondary columns (CI, p, noise, method, n, note) on demand: the table fits 1280 px without. */
  function columnToggles() {
    document.querySelectorAll("[data-columns-target]").forEach(function (ctl) {
      var table = document.getElementById(ctl.getAttribute("data-columns-target"));
      if (!table) { return; }
      function apply() { table.classList.toggle("show-extra", ctl.checked); }
      ctl.addEventListener("change", apply);
      apply();
    });
  }

  function init() {
    document.querySelectorAll("figure.chart[data-points]").forEach(lineChart);
    document.querySelectorAll("figure.chart").forEach(pointTips);
    tableFilters();
    columnToggles();
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
