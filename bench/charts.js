// Draws every <figure class="chart"> of a bench page as inline SVG, from the JSON spec the
// figure holds (written by bench/page.py; the spec's fields are described there).
// Each drawn point carries its figure in data-value, so a browser test can check the
// picture against the numbers it was drawn from.
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  var STEP_COLORS = { up: "#c44e52", down: "#55a868" };

  function el(name, attrs, parent) {
    var node = document.createElementNS(NS, name);
    Object.keys(attrs || {}).forEach(function (key) { node.setAttribute(key, attrs[key]); });
    if (parent) parent.appendChild(node);
    return node;
  }
  function label(parent, x, y, content, attrs) {
    var node = el("text", Object.assign({ x: x, y: y, "font-size": 9 }, attrs || {}), parent);
    node.textContent = content;
    return node;
  }
  function tip(node, content) { el("title", {}, node).textContent = content; }
  function hasReference(spec) { return spec.reference !== null && spec.reference !== undefined; }

  function withCommas(v) { return Math.round(v).toString().replace(/\B(?=(\d{3})+(?!\d))/g, ","); }

  // The axis unit: a scale that makes tick labels short, and the exact form for tooltips.
  function unitOf(kind, values) {
    if (kind === "percent") {
      var percent = function (v) { return (v * 100).toFixed(3) + "%"; };
      return { factor: 100, suffix: "%", exact: percent };
    }
    if (kind === "ratio") {
      return { factor: 1, suffix: "x", exact: function (v) { return v.toFixed(3) + "x"; } };
    }
    var largest = Math.max.apply(null, values.map(Math.abs).concat([1]));
    var names = ["B", "KiB", "MiB", "GiB"];
    var power = Math.min(names.length - 1, Math.floor(Math.log(largest) / Math.log(1024)));
    return {
      factor: 1 / Math.pow(1024, power),
      suffix: " " + names[power],
      exact: function (v) { return withCommas(v) + " B"; },
    };
  }

  // Round ticks covering [lo, hi] (already in the unit's scale).
  function ticks(lo, hi, zero) {
    if (zero) { lo = Math.min(lo, 0); hi = Math.max(hi, 0); }
    if (hi - lo < 1e-12) { var pad = Math.abs(hi) * 0.01 || 1; lo -= pad; hi += pad; }
    var raw = (hi - lo) / 4, magnitude = Math.pow(10, Math.floor(Math.log10(raw)));
    var f = raw / magnitude, step = (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * magnitude;
    var first = Math.floor(lo / step) * step, last = Math.ceil(hi / step) * step;
    var decimals = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
    var values = [];
    for (var i = 0; first + i * step <= last + step / 2; i++) values.push(first + i * step);
    return { lo: first, hi: last, values: values, decimals: decimals };
  }

  // Every value the axis must cover: the series' and the reference line's.
  function present(spec) {
    var values = [];
    spec.series.forEach(function (s) {
      s.values.forEach(function (v) { if (v !== null) values.push(v); });
    });
    if (hasReference(spec)) values.push(spec.reference);
    return values;
  }

  function legend(svg, spec, x, y) {
    spec.series.forEach(function (s) {
      el("rect", { x: x, y: y - 8, width: 9, height: 9, fill: s.color }, svg);
      label(svg, x + 12, y, s.label);
      x += 12 + 5 * s.label.length + 12;  // a 9px sans-serif character is about 5px wide
    });
  }

  function newSvg(spec, width, height, titleX) {
    var svg = el("svg", {
      viewBox: "0 0 " + width + " " + height, width: width, height: height,
      class: "chart-svg", "data-kind": spec.kind,
    });
    label(svg, titleX, 14, spec.title, { "font-weight": "bold", "font-size": 12 });
    legend(svg, spec, titleX, 30);
    return svg;
  }

  // One line per series over the runs (x: the run, y: the figure), steps marked on it.
  function drawLines(spec) {
    var W = 360, H = 240, left = 62, right = 24, top = 40, bottom = 46;
    var n = spec.labels.length, plotW = W - left - right, plotH = H - top - bottom;
    var unit = unitOf(spec.unit, present(spec));
    var scaled = present(spec).map(function (v) { return v * unit.factor; });
    var axis = ticks(Math.min.apply(null, scaled), Math.max.apply(null, scaled), spec.zero);
    var xOf = function (i) { return left + (n === 1 ? plotW / 2 : (i * plotW) / (n - 1)); };
    var yAt = function (t) { return top + plotH - ((t - axis.lo) / (axis.hi - axis.lo)) * plotH; };
    var yOf = function (v) { return yAt(v * unit.factor); };
    var svg = newSvg(spec, W, H, 8);
    axis.values.forEach(function (t) {
      el("line", { x1: left, x2: W - right, y1: yAt(t), y2: yAt(t), stroke: "#e4e4e4" }, svg);
      label(svg, left - 4, yAt(t) + 3, t.toFixed(axis.decimals) + unit.suffix,
            { "text-anchor": "end" });
    });
    // Every `every`-th run is named, as many as fit side by side, and always the latest.
    var widest = 5 * Math.max.apply(null, spec.labels.map(function (l) { return l.length; })) + 8;
    var every = Math.max(1, Math.ceil(widest / (plotW / Math.max(1, n - 1))));
    spec.labels.forEach(function (name, i) {
      if (i !== n - 1 && (i % every !== 0 || n - 1 - i < every)) return;
      label(svg, xOf(i), top + plotH + 14, name, { "text-anchor": "middle", class: "run-label" });
    });
    if (hasReference(spec)) {
      var y = yOf(spec.reference);
      el("line", { x1: left, x2: W - right, y1: y, y2: y, stroke: "#888",
                   "stroke-dasharray": "4 3" }, svg);
    }
    spec.series.forEach(function (s, j) {
      // Earlier series are drawn wider, so that a line hidden under a later one still shows.
      var width = 1.5 + 1.5 * (spec.series.length - 1 - j);
      var d = "", pen = "M";  // a run without the figure breaks the line
      s.values.forEach(function (v, i) {
        if (v === null) { pen = "M"; return; }
        d += pen + xOf(i) + "," + yOf(v) + " ";
        pen = "L";
      });
      el("path", { d: d.trim(), fill: "none", stroke: s.color, "stroke-width": width,
                   "data-series": s.key }, svg);
      s.values.forEach(function (v, i) {
        if (v === null) return;
        var point = el("circle", {
          class: "point", cx: xOf(i), cy: yOf(v), r: 1.5 + width, fill: s.color,
          "data-series": s.key, "data-index": i, "data-value": v,
        }, svg);
        tip(point, s.label + ", " + spec.labels[i] + ": " + unit.exact(v));
      });
      (s.steps || []).forEach(function (step) { drawStep(svg, s, step, xOf, yOf, top, plotH); });
    });
    el("rect", { x: left, y: top, width: plotW, height: plotH, fill: "none", stroke: "#999" }, svg);
    return svg;
  }

  // A dashed line across the plot at the run, and a triangle at the point, up or down.
  function drawStep(svg, series, step, xOf, yOf, top, plotH) {
    var x = xOf(step.index), y = yOf(series.values[step.index]);
    var color = STEP_COLORS[step.direction], sign = step.direction === "up" ? -1 : 1;
    var g = el("g", { class: "step", "data-series": series.key, "data-index": step.index,
                      "data-direction": step.direction }, svg);
    el("line", { x1: x, x2: x, y1: top, y2: top + plotH, stroke: color,
                 "stroke-dasharray": "3 2" }, g);
    var tipY = y + sign * 17, baseY = y + sign * 8;  // a triangle pointing the way it moved
    el("path", { d: "M" + x + "," + tipY + " L" + (x - 5) + "," + baseY + " L" + (x + 5) + ","
                 + baseY + " Z", fill: color }, g);
    tip(g, step.reason);
  }

  // One row per label (a model), one bar per series in it, from zero.
  function drawBars(spec) {
    var left = 190, right = 60, top = 40, bottom = 26, row = 14 * spec.series.length + 10;
    var W = 760, plotW = W - left - right, plotH = row * spec.labels.length;
    var H = top + plotH + bottom;
    var unit = unitOf(spec.unit, present(spec));
    var largest = Math.max.apply(null, present(spec).map(function (v) { return v * unit.factor; }));
    var axis = ticks(0, largest, true);
    var xAt = function (t) { return left + ((t - axis.lo) / (axis.hi - axis.lo)) * plotW; };
    var xOf = function (v) { return xAt(v * unit.factor); };
    var svg = newSvg(spec, W, H, left);
    axis.values.forEach(function (t) {
      el("line", { x1: xAt(t), x2: xAt(t), y1: top, y2: top + plotH, stroke: "#e4e4e4" }, svg);
      label(svg, xAt(t), top + plotH + 14, t.toFixed(axis.decimals) + unit.suffix,
            { "text-anchor": "middle" });
    });
    spec.labels.forEach(function (name, i) {
      var y0 = top + i * row + 5;
      label(svg, left - 6, y0 + row / 2, name, { "text-anchor": "end", "font-size": 10 });
      spec.series.forEach(function (s, j) {
        var v = s.values[i];
        if (v === null) return;
        var y = y0 + j * 14;
        var bar = el("rect", {
          class: "bar", x: xOf(0), y: y, width: xOf(v) - xOf(0), height: 11, fill: s.color,
          "data-series": s.key, "data-index": i, "data-value": v,
        }, svg);
        tip(bar, s.label + ", " + name + ": " + unit.exact(v));
        label(svg, xOf(v) + 3, y + 9, (v * unit.factor).toFixed(2) + unit.suffix);
      });
    });
    if (hasReference(spec)) {
      var x = xOf(spec.reference);
      el("line", { x1: x, x2: x, y1: top - 4, y2: top + plotH, stroke: "#555",
                   "stroke-dasharray": "4 3" }, svg);
      label(svg, x + 3, top + plotH + 24, spec.reference_label || "");
    }
    el("rect", { x: left, y: top, width: plotW, height: plotH, fill: "none", stroke: "#999" }, svg);
    return svg;
  }

  document.querySelectorAll("figure.chart").forEach(function (figure) {
    var spec = JSON.parse(figure.querySelector("script.chart-spec").textContent);
    if (!present(spec).length) return;
    figure.appendChild(spec.kind === "bars" ? drawBars(spec) : drawLines(spec));
    figure.setAttribute("data-drawn", "true");
  });
})();
