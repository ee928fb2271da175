// The console's Channels and Consumers tabs (RabbitMQ's, with its words): a page of the
// live stream's channels or consumers list (lists.js asks it with "channels." or
// "consumers." parameters of GET /api/console/live), filtered by the server (a regular
// expression, checked once by a GET of one row when it changes), asked only while its tab
// is shown: the server builds channel rows only while someone pages them, and sends the
// page again only when one of its rows changed. No request of its own each second.
"use strict";

(function () {
  const app = window.consoleApp;
  const lists = window.consoleLists;
  const { el, api, fmt, $ } = app;
  const enc = encodeURIComponent;
  const PAGE_SIZE = 100;
  const NAMES = ["channels", "consumers"];
  const filters = { channels: "", consumers: "" };
  // The tab whose page this file asked (null: none).
  let asking = null;

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
      el("td", { class: "tag-name", text: c.consumer_tag }), el("td", { class: "queue", text: (c.queue || {}).name }), el("td", { class: "vhost", text: c.vhost }),
      el("td", { class: "channel", text: (c.channel_details || {}).name }), el("td", { text: c.ack_required ? "yes" : "no" }),
      el("td", { text: c.exclusive ? "yes" : "no" }), el("td", { class: "num", text: c.prefetch_count ? fmt(c.prefetch_count) : "none" }),
      el("td", { class: "num", text: fmt(c.unacked) })),
  };

  function queryOf(name) {
    const filter = filters[name];
    return { page: 1, page_size: PAGE_SIZE, name: filter, use_regex: Boolean(filter), sort: "", sort_reverse: false };
  }

  // Ask the live stream for ``name``'s page (null: stop asking this file's), and open it
  // again with the new query.
  function ask(name) {
    if (asking && asking !== name) lists.ask(asking, null);
    asking = name;
    if (name) lists.ask(name, queryOf(name));
    app.connect();
  }

  function asked(name) {
    const query = lists.queries[name];
    return asking === name && query && query.name === filters[name] && query.page_size === PAGE_SIZE;
  }

  function render(name, s) {
    if (!asked(name)) {
      ask(name); // the first time this tab is shown, or the Connections tab asked another page
      $(`${name}-page-info`).textContent = "waiting for the broker...";
      return;
    }
    const counts = s[`${name}Page`] || {};
    if (counts.page === undefined) return; // its first page is on its way
    const total = counts.total_count || 0, shown = counts.filtered_count || 0;
    $(`${name}-page-info`).textContent = `${fmt(counts.item_count || 0)} shown · ${shown === total ? fmt(total) : `${fmt(shown)} of ${fmt(total)}`} ${name}${shown > PAGE_SIZE ? " (filter to see the others)" : ""}`;
    app.replaceRows($(`${name}-table`).tBodies[0], (s[name] || []).map(ROWS[name]));
  }

  // A filter is checked once (a GET of one row: a bad regular expression is answered 400
  // with its reason), then asked of the live stream.
  const timers = {};
  function filterChanged(name) {
    clearTimeout(timers[name]);
    timers[name] = setTimeout(async () => {
      const filter = $(`${name}-filter`).value;
      const box = $(`${name}-query-error`);
      if (filter) {
        try {
          await api("GET", `/api/${name}?page=1&page_size=1&use_regex=true&name=${enc(filter)}`);
        } catch (error) {
          box.textContent = error.message;
          return;
        }
      }
      box.textContent = "";
      filters[name] = filter;
      ask(name);
    }, 300);
  }

  for (const name of NAMES) {
    $(`${name}-filter`).addEventListener("input", () => filterChanged(name));
    $(`${name}-query`).addEventListener("submit", (event) => event.preventDefault());
    app.state.renderers[name] = (s) => render(name, s);
  }
  // Leaving the tab stops its page.
  window.addEventListener("hashchange", () => {
    if (asking && window.location.hash !== `#${asking}`) ask(null);
  });
})();
