// The lists the console holds from the live stream (GET /api/console/live, docs/console.md):
// every exchange, binding and connection, kept by key from a snapshot and each second's
// delta; the page of queues the table shows (the server filters, sorts and pages them),
// kept from its page events; and the page's histories (60 samples a queue, a sample a
// second taken from its row). The queue table's query lives here too: changing it opens
// the stream again, which starts with a snapshot and the new page.
"use strict";

(function () {
  const HISTORY = 60;
  const LISTS = ["exchanges", "bindings", "connections"];
  const held = {
    version: -1, state: null, me: null,
    maps: Object.fromEntries(LISTS.map((name) => [name, new Map()])),
    arrays: Object.fromEntries(LISTS.map((name) => [name, []])),
    page: { keys: [], rows: new Map(), history: new Map(), counts: {} },
  };
  // The queue table's query: RabbitMQ's parameters (docs/management.md).
  const query = { page: 1, page_size: 50, name: "", use_regex: false, sort: "", sort_reverse: false };

  function queryString() {
    const params = new URLSearchParams({ page: String(query.page), page_size: String(query.page_size) });
    if (query.name) params.set("name", query.name);
    if (query.use_regex) params.set("use_regex", "true");
    if (query.sort) params.set("sort", query.sort);
    if (query.sort_reverse) params.set("sort_reverse", "true");
    return "?" + params.toString();
  }

  const byVhostThen = (...fields) => (a, b) =>
    ((a.vhost || "/") !== "/") - ((b.vhost || "/") !== "/") ||
    String(a.vhost).localeCompare(String(b.vhost)) ||
    fields.reduce((order, f) => order || String(a[f]).localeCompare(String(b[f])), 0);
  const ORDER = {
    exchanges: byVhostThen("name"),
    bindings: byVhostThen("source", "destination_type", "destination", "routing_key"),
    connections: (a, b) => a.id - b.id,
  };

  function rebuild(name) {
    held.arrays[name] = [...held.maps[name].values()].sort(ORDER[name]);
  }

  function view() {
    const page = held.page;
    const queues = page.keys.map((key) => ({ ...page.rows.get(key), key, history: page.history.get(key) || [] }));
    return { ...held.state, me: held.me, ...held.arrays, queues, queuePage: page.counts };
  }

  function pointOf(row) {
    return { messages: row.messages, unacked: row.messages_unacked, publish: row.publish_rate, deliver: row.deliver_rate, ack: row.ack_rate };
  }

  window.consoleLists = {
    query: queryString,
    queueQuery: query,
    view,
    // A viewer's first message, or after it fell behind: the state and whole lists.
    snapshot(data) {
      held.version = data.version;
      held.state = data.state;
      held.me = data.me;
      for (const name of LISTS) {
        held.maps[name] = new Map(Object.entries(data.lists[name]));
        rebuild(name);
      }
      return view();
    },
    // Each second: the state and what changed in the lists; a sample for each queue shown.
    delta(data) {
      held.version = data.version;
      held.state = data.state;
      for (const name of LISTS) {
        const change = data.lists[name];
        const map = held.maps[name];
        for (const key of change.removed) map.delete(key);
        for (const [key, row] of Object.entries(change.added)) map.set(key, row);
        for (const [key, row] of Object.entries(change.changed)) map.set(key, row);
        if (change.removed.length || Object.keys(change.added).length || Object.keys(change.changed).length) rebuild(name);
      }
      const page = held.page;
      for (const key of page.keys) {
        const samples = page.history.get(key) || [];
        samples.push(pointOf(page.rows.get(key)));
        if (samples.length > HISTORY) samples.splice(0, samples.length - HISTORY);
        page.history.set(key, samples);
      }
      return view();
    },
    // The page of queues: its keys in order, the rows new to it or changed, the histories
    // of the rows new to it; true when it is a whole page (the view is then new).
    page(data) {
      const page = held.page;
      const keep = new Set(data.keys);
      for (const key of [...page.rows.keys()]) {
        if (!keep.has(key)) { page.rows.delete(key); page.history.delete(key); }
      }
      for (const [key, row] of Object.entries(data.rows)) page.rows.set(key, row);
      for (const [key, samples] of Object.entries(data.history)) page.history.set(key, samples);
      page.keys = data.keys;
      page.counts = { page: data.page, page_size: data.page_size, page_count: data.page_count, filtered_count: data.filtered_count, item_count: data.item_count, total_count: data.total_count };
      query.page = data.page;
      return data.whole;
    },
  };
})();
