// The charts page: draws each chart from the numbers the server computed (dashboard/charts.py),
// carried in #charts's data-charts attribute (no inline script: the CSP allows only this
// file and Chart.js, served by the daemon). Colours follow the page's light or dark theme
// and are read again when the system switches.
"use strict";
(function () {
  const holder = document.getElementById("charts");
  if (!holder || typeof Chart === "undefined") return;
  const specs = JSON.parse(holder.dataset.charts || "[]");
  const drawn = [];

  function theme() {
    const dark = window.matchMedia("(prefers-color-scheme: dark)").matches;
    const style = getComputedStyle(document.body);
    const text = style.getPropertyValue("--pico-muted-color").trim() || (dark ? "#aaa" : "#555");
    return {
      text: text,
      grid: dark ? "rgba(255,255,255,0.10)" : "rgba(0,0,0,0.08)",
      ok: dark ? "#66bb6a" : "#2e8540",
      bad: dark ? "#ef5350" : "#c62828",
      warn: dark ? "#ffb74d" : "#e08a00",
      muted: dark ? "#90a4ae" : "#78909c",
      primary: dark ? "#64b5f6" : "#1565c0",
    };
  }

  function format(value, unit) {
    if (value === null || value === undefined) return "-";
    if (unit === "$") return "$" + value.toFixed(2);
    if (unit === "%") return value.toFixed(1) + " %";
    if (unit === "s") return (value >= 10 ? value.toFixed(0) : value.toFixed(1)) + " s";
    return String(value);
  }

  function options(spec, colours) {
    const horizontal = spec.kind === "hbar";
    const valueAxis = {
      beginAtZero: true,
      stacked: spec.stacked,
      grid: { color: colours.grid },
      ticks: { color: colours.text, callback: (v) => format(v, spec.unit), precision: spec.unit === "tasks" ? 0 : undefined },
    };
    if (spec.unit === "%") valueAxis.suggestedMax = 20;
    const labelAxis = {
      stacked: spec.stacked,
      grid: { display: false },
      ticks: { color: colours.text, autoSkip: true, maxRotation: 0, autoSkipPadding: 12 },
    };
    return {
      responsive: true,
      maintainAspectRatio: false,
      animation: false,
      indexAxis: horizontal ? "y" : "x",
      spanGaps: false,
      interaction: { mode: horizontal ? "nearest" : "index", intersect: false },
      scales: horizontal ? { x: valueAxis, y: labelAxis } : { x: labelAxis, y: valueAxis },
      plugins: {
        legend: { display: spec.series.length > 1, labels: { color: colours.text, boxWidth: 12 } },
        tooltip: {
          callbacks: {
            label: (item) => item.dataset.label + ": " + format(item.raw, spec.unit),
          },
        },
      },
    };
  }

  function datasets(spec, colours) {
    return spec.series.map((s) => ({
      label: s.label,
      data: s.values,
      backgroundColor: spec.id === "queue" ? colours[s.colour] + "33" : colours[s.colour],
      borderColor: colours[s.colour],
      borderWidth: spec.kind === "line" ? 2 : 0,
      pointRadius: spec.kind === "line" && spec.labels.length <= 31 ? 3 : 0,
      stepped: spec.id === "queue",
      fill: spec.id === "queue" ? "origin" : false,
    }));
  }

  function draw() {
    const colours = theme();
    for (const spec of specs) {
      const canvas = holder.querySelector('canvas[data-chart="' + spec.id + '"]');
      if (!canvas) continue;
      drawn.push(new Chart(canvas, {
        type: spec.kind === "line" ? "line" : "bar",
        data: { labels: spec.labels, datasets: datasets(spec, colours) },
        options: options(spec, colours),
      }));
    }
  }

  draw();
  window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", () => {
    while (drawn.length) drawn.pop().destroy();
    draw();
  });
})();
