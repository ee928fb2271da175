// The console's Overview (RabbitMQ's first page, with its words): this broker's totals,
// message rates and node figures, from the live state's "overview" (overview.py).
"use strict";

(function () {
  const app = window.consoleApp;
  const { el, fmt, $ } = app;

  function bytes(n) {
    if (n === null || n === undefined) return "-";
    if (n >= 1024 ** 3) return `${(n / 1024 ** 3).toFixed(1)} GiB`;
    if (n >= 1024 ** 2) return `${(n / 1024 ** 2).toFixed(1)} MiB`;
    return `${(n / 1024).toFixed(1)} KiB`;
  }

  function uptime(seconds) {
    const s = Math.floor(seconds || 0);
    const d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600), m = Math.floor((s % 3600) / 60);
    return d ? `${d}d ${h}h` : h ? `${h}h ${m}m` : `${m}m ${s % 60}s`;
  }

  // RabbitMQ's chart ranges: GET /api/console/history, read again each second for the
  // last minute, each 10 s for the others (a point a minute, or ten).
  const RANGES = { "1m": ["last minute", 1000], "1h": ["last hour", 10000], "1d": ["last day", 10000] };
  let range = "1m";
  let askedAt = 0;
  let askedFor = null;

  function renderCharts() {
    if (askedFor === range && Date.now() - askedAt < RANGES[range][1]) return;
    askedFor = range;
    askedAt = Date.now();
    const wanted = range;
    app.api("GET", `/api/console/history?range=${wanted}`).then((answer) => {
      if (wanted !== range) return;
      const points = answer.points;
      const axis = `${RANGES[wanted][0]} (${points.length} ${points.length === 1 ? "point" : "points"})`;
      const column = (key) => points.map((p) => p[key]);
      $("overview-charts").replaceChildren(
        charts.lineChart("queued messages", [{ name: "ready", values: column("messages_ready") }, { name: "unacked", values: column("messages_unacked") }], { axis }),
        charts.lineChart("message rates (/s)", [{ name: "publish", values: column("published_rate") }, { name: "deliver", values: column("delivered_rate") }, { name: "consumer ack", values: column("acked_rate") }], { axis }));
    }, (error) => { $("overview-charts").textContent = error.message; });
  }

  $("overview-range").addEventListener("change", () => { range = $("overview-range").value; renderCharts(); });

  const figure = (id, label, value) => el("div", { class: "figure", id }, el("div", { class: "label", text: label }), el("div", { class: "value", text: value }));

  function renderOverview(s) {
    const o = s.overview;
    if (!o) return;
    const t = o.totals, r = o.rates, n = o.node;
    $("overview-totals").replaceChildren(
      el("h3", { text: "Queued messages" }),
      el("div", { class: "figures" }, figure("ov-ready", "Ready", fmt(t.messages_ready)), figure("ov-unacked", "Unacked", fmt(t.messages_unacked)),
        figure("ov-total", "Total", fmt(t.messages_ready + t.messages_unacked))),
      el("h3", { text: "Message rates (last second)" }),
      el("div", { class: "figures" }, figure("ov-publish", "Publish", `${fmt(r.published_rate)}/s`), figure("ov-deliver", "Deliver", `${fmt(r.delivered_rate)}/s`),
        figure("ov-ack", "Consumer ack", `${fmt(r.acked_rate)}/s`)),
      el("h3", { text: "Global counts" }),
      el("div", { class: "figures" }, ...[["connections", "Connections"], ["channels", "Channels"], ["exchanges", "Exchanges"], ["queues", "Queues"], ["consumers", "Consumers"], ["vhosts", "Vhosts"]]
        .map(([key, label]) => figure(`ov-${key}`, label, fmt(t[key])))));
    const alarm = (name) => n.alarms.includes(name);
    const row = el("tr", { "data-node": n.name },
      el("td", { text: n.name }),
      el("td", { class: "fds", text: `${fmt(n.fd_used)}${n.fd_total ? " / " + fmt(n.fd_total) + " available" : ""}` }),
      el("td", { class: "sockets", text: fmt(n.sockets_used) }),
      el("td", { class: `memory${alarm("memory") ? " alarm" : ""}`, text: `${bytes(n.memory_used)}${n.memory_limit ? " / " + bytes(n.memory_limit) + " high watermark" : ""}${alarm("memory") ? ": MEMORY ALARM, publishers blocked" : ""}` }),
      el("td", { class: `disk${alarm("disk") ? " alarm" : ""}`, text: n.disk_free === null ? "- (no data directory: nothing written)" : `${bytes(n.disk_free)} free${n.disk_free_limit ? " / " + bytes(n.disk_free_limit) + " low watermark" : ""}${alarm("disk") ? ": DISK ALARM, publishers blocked" : ""}` }),
      el("td", { class: "uptime", text: uptime(n.uptime) }),
      el("td", { class: "listeners", text: n.listeners.map((l) => `${l.protocol} ${l.port}`).join(", ") }));
    app.replaceRows($("overview-node").tBodies[0], [row]);
    renderCharts();
  }

  app.state.renderers.overview = renderOverview;
})();
