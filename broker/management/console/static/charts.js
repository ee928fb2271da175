// Small SVG charts for the console: a sparkline and a line chart. No library, no network.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";

function svgElement(name, attributes) {
  const element = document.createElementNS(SVG_NS, name);
  for (const [key, value] of Object.entries(attributes)) element.setAttribute(key, String(value));
  return element;
}

function pathOf(values, width, height, max) {
  if (values.length === 0) return "";
  if (values.length === 1) values = [values[0], values[0]]; // one sample: a flat line
  const step = values.length > 1 ? width / (values.length - 1) : 0;
  return values
    .map((value, i) => {
      const x = (i * step).toFixed(1);
      const y = (height - 1 - (max > 0 ? (value / max) * (height - 2) : 0)).toFixed(1);
      return `${i === 0 ? "M" : "L"}${x},${y}`;
    })
    .join(" ");
}

// A sparkline of the last values (depth or lag): the line and the last value's dot.
function sparkline(values, options = {}) {
  const width = options.width || 90;
  const height = options.height || 20;
  const color = options.color || "#2563a8";
  const svg = svgElement("svg", { width, height, viewBox: `0 0 ${width} ${height}`, class: "spark" });
  const max = Math.max(1, ...values);
  svg.appendChild(svgElement("path", { d: pathOf(values, width, height, max), fill: "none", stroke: color, "stroke-width": 1.5 }));
  if (values.length) {
    const last = values[values.length - 1];
    const y = height - 1 - (last / max) * (height - 2);
    svg.appendChild(svgElement("circle", { cx: width - 1.5, cy: y, r: 2, fill: color }));
  }
  return svg;
}

// A sparkline with its scale beside it: "max N UNIT" (the line spans 0 to that, over the
// last 60 s), so a reader need not guess what the height means.
function scaledSparkline(values, unit, options = {}) {
  const box = document.createElement("span");
  box.className = "spark-box";
  const peak = values.length ? Math.max(...values) : 0;
  const line = sparkline(values, options);
  const title = svgElement("title", {});
  title.textContent = `last 60 s, from 0 to ${peak.toLocaleString("en")} ${unit}`;
  line.insertBefore(title, line.firstChild);
  box.appendChild(line);
  const scale = document.createElement("span");
  scale.className = "spark-scale";
  scale.textContent = `max ${peak.toLocaleString("en")} ${unit}`;
  box.appendChild(scale);
  return box;
}

const SERIES_COLORS = ["#2563a8", "#0b6e4f", "#b45309"];

// A line chart of several series over the last samples, with a y scale and a legend.
function lineChart(title, series, options = {}) {
  const width = options.width || 360;
  const height = options.height || 120;
  const box = document.createElement("div");
  box.className = "chart";
  const caption = document.createElement("div");
  caption.className = "title";
  caption.textContent = title;
  box.appendChild(caption);
  const all = series.flatMap((s) => s.values);
  const max = Math.max(1, ...all);
  const svg = svgElement("svg", { width, height: height + 14, viewBox: `0 0 ${width} ${height + 14}` });
  svg.appendChild(svgElement("line", { x1: 0, y1: height, x2: width, y2: height, stroke: "#d9e2ec" }));
  const label = svgElement("text", { x: 2, y: 10, "font-size": 10, fill: "#616e7c" });
  label.textContent = `max ${Math.round(max * 100) / 100}`;
  svg.appendChild(label);
  const axis = svgElement("text", { x: 2, y: height + 12, "font-size": 10, fill: "#616e7c" });
  axis.textContent = options.axis || "last 60 s";
  svg.appendChild(axis);
  series.forEach((s, i) => {
    svg.appendChild(svgElement("path", { d: pathOf(s.values, width, height, max), fill: "none", stroke: SERIES_COLORS[i % 3], "stroke-width": 1.5 }));
  });
  box.appendChild(svg);
  const legend = document.createElement("div");
  legend.className = "legend";
  series.forEach((s, i) => {
    const item = document.createElement("span");
    const swatch = document.createElement("i");
    swatch.className = `sw c${i % 3}`;
    item.appendChild(swatch);
    item.appendChild(document.createTextNode(`${s.name} ${s.values.length ? s.values[s.values.length - 1] : "-"}`));
    legend.appendChild(item);
  });
  box.appendChild(legend);
  return box;
}

window.charts = { sparkline, scaledSparkline, lineChart };
