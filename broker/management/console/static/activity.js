// The console's Channels and Consumers tabs (RabbitMQ's, with its words): a page of
// GET /api/channels or /api/consumers, filtered by the server (a regular expression with
// "regex"), read again every second while the tab is shown.
"use strict";

(function () {
  const app = window.consoleApp;
  const { el, api, fmt, $ } = app;
  const enc = encodeURIComponent;
  const PAGE_SIZE = 100;
  const asked = { channels: 0, consumers: 0 };
  const filters = { channels: "", consumers: "" };

  function mode(ch) {
    return [ch.confirm ? "C" : "", ch.transactional ? "T" : ""].join("") || "-";
  }

  const ROWS = {
    channels: (ch) => el("tr", { "data-channel": ch.name },
      el("td", { class: "name", text: ch.name }), el("td", { class: "vhost", text: ch.vhost }), el("td", { text: ch.user || "-" }),
      el("td", { class: "mode", title: "C: confirm mode, T: transactional", text: mode(ch) }),
      el("td", { text: ch.flow ? ch.state : `${ch.state}, flow stopped` }),
      el("td", { class: "num", text: ch.confirm ? fmt(ch.messages_unconfirmed) : "-" }),
      el("td", { class: "num prefetch", text: ch.prefetch_count ? fmt(ch.prefetch_count) : "none" }),
      el("td", { class: "num unacked", text: fmt(ch.messages_unacknowledged) }),
      el("td", { class: "num consumers", text: ch.replication_stream ? "HA replication stream" : fmt(ch.consumer_count) })),
    consumers: (c) => el("tr", { "data-tag": c.consumer_tag },
      el("td", { class: "tag-name", text: c.consumer_tag }), el("td", { class: "queue", text: c.queue.name }), el("td", { class: "vhost", text: c.vhost }),
      el("td", { class: "channel", text: c.channel_details.name }), el("td", { text: c.ack_required ? "yes" : "no" }),
      el("td", { text: c.exclusive ? "yes" : "no" }), el("td", { class: "num", text: c.prefetch_count ? fmt(c.prefetch_count) : "none" }),
      el("td", { class: "num", text: fmt(c.unacked) })),
  };

  function render(name) {
    if (Date.now() - asked[name] < 900) return;
    asked[name] = Date.now();
    const filter = filters[name];
    const query = `page=1&page_size=${PAGE_SIZE}${filter ? `&use_regex=true&name=${enc(filter)}` : ""}`;
    api("GET", `/api/${name}?${query}`).then((answer) => {
      $(`${name}-query-error`).textContent = "";
      const total = answer.total_count, shown = answer.filtered_count;
      $(`${name}-page-info`).textContent = `${fmt(answer.item_count)} shown · ${shown === total ? fmt(total) : `${fmt(shown)} of ${fmt(total)}`} ${name}${shown > PAGE_SIZE ? " (filter to see the others)" : ""}`;
      app.replaceRows($(`${name}-table`).tBodies[0], answer.items.map(ROWS[name]));
    }, (error) => { $(`${name}-query-error`).textContent = error.message; });
  }

  for (const name of ["channels", "consumers"]) {
    $(`${name}-filter`).addEventListener("input", () => { filters[name] = $(`${name}-filter`).value; asked[name] = 0; render(name); });
    $(`${name}-query`).addEventListener("submit", (event) => event.preventDefault());
    app.state.renderers[name] = () => render(name);
  }
})();
