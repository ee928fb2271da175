// The lists the console holds from the live stream (GET /api/console/live, docs/console.md):
// a page of each list the tables show (queues, exchanges, bindings, connections), filtered,
// sorted and paged by the server and kept from its page events, and the queue page's
// histories (60 samples a queue, a sample a second taken from its row). The tables'
// queries live here too: changing one opens the stream again, which starts with a snapshot
// (the state) and the new pages. A connection's channels are a page of the channels list
// (keys "connection:number"), asked only while a connection's row is selected or the
// Channels tab is shown (the server builds channel rows only while someone pages them);
// the Consumers tab's page of consumers only while it is shown (activity.js).
"use strict";

(function () {
  const HISTORY = 60;
  const LISTS = ["queues", "exchanges", "bindings", "connections"];
  // Lists paged only while their query is set (null: not asked, nothing held).
  const ASKED = ["channels", "consumers"];
  const emptyPage = () => ({ keys: [], rows: new Map(), history: new Map(), counts: {} });
  const held = { version: -1, state: null, me: null, pages: Object.fromEntries([...LISTS, ...ASKED].map((name) => [name, emptyPage()])) };
  // Each table's query: RabbitMQ's parameters (docs/management.md); the queues' plain, the
  // others' prefixed with the list's name and a dot.
  const newQuery = () => ({ page: 1, page_size: 50, name: "", use_regex: false, sort: "", sort_reverse: false });
  const queries = { ...Object.fromEntries(LISTS.map((name) => [name, newQuery()])), ...Object.fromEntries(ASKED.map((name) => [name, null])) };

  function queryString() {
    const params = new URLSearchParams();
    for (const name of [...LISTS, ...ASKED]) {
      const query = queries[name];
      if (!query) continue;
      const prefix = name === "queues" ? "" : `${name}.`;
      params.set(`${prefix}page`, String(query.page));
      params.set(`${prefix}page_size`, String(query.page_size));
      if (query.name) params.set(`${prefix}name`, query.name);
      if (query.use_regex) params.set(`${prefix}use_regex`, "true");
      if (query.sort) params.set(`${prefix}sort`, query.sort);
      if (query.sort_reverse) params.set(`${prefix}sort_reverse`, "true");
    }
    return "?" + params.toString();
  }

  function rowsOf(name) {
    const page = held.pages[name];
    if (name !== "queues") return page.keys.map((key) => ({ ...page.rows.get(key), key }));
    return page.keys.map((key) => ({ ...page.rows.get(key), key, history: page.history.get(key) || [] }));
  }

  function view() {
    const shown = { ...held.state, me: held.me };
    for (const name of [...LISTS, ...ASKED]) {
      shown[name] = rowsOf(name);
      shown[`${name}Page`] = held.pages[name].counts;
    }
    shown.queuePage = held.pages.queues.counts;
    return shown;
  }

  function pointOf(row) {
    return { messages: row.messages, unacked: row.messages_unacked, publish: row.publish_rate, deliver: row.deliver_rate, ack: row.ack_rate };
  }

  window.consoleLists = {
    query: queryString,
    // Ask a page of one of ASKED (a query), or stop asking it (null); what was held of it
    // is dropped (its counts are empty until the first page comes).
    ask(name, query) {
      queries[name] = query;
      held.pages[name] = emptyPage();
    },
    queueQuery: queries.queues,
    queries,
    view,
    // A viewer's first message, or after it fell behind: the state (the lists come as pages).
    snapshot(data) {
      held.version = data.version;
      held.state = data.state;
      held.me = data.me;
      return view();
    },
    // Each second: the state; a sample for each queue shown.
    delta(data) {
      held.version = data.version;
      held.state = data.state;
      const page = held.pages.queues;
      for (const key of page.keys) {
        const samples = page.history.get(key) || [];
        samples.push(pointOf(page.rows.get(key)));
        if (samples.length > HISTORY) samples.splice(0, samples.length - HISTORY);
        page.history.set(key, samples);
      }
      return view();
    },
    // A page of a list: its keys in order, the rows new to it or changed, the histories of
    // the queues new to it; true when it is a whole page (the view is then new).
    page(data) {
      const name = data.list || "queues";
      const page = held.pages[name];
      if (!queries[name]) return false; // no longer asked (a stream being replaced)
      const keep = new Set(data.keys);
      for (const key of [...page.rows.keys()]) {
        if (!keep.has(key)) { page.rows.delete(key); page.history.delete(key); }
      }
      for (const [key, row] of Object.entries(data.rows)) page.rows.set(key, row);
      for (const [key, samples] of Object.entries(data.history || {})) page.history.set(key, samples);
      page.keys = data.keys;
      page.counts = { page: data.page, page_size: data.page_size, page_count: data.page_count, filtered_count: data.filtered_count, item_count: data.item_count, total_count: data.total_count };
      queries[name].page = data.page;
      return data.whole;
    },
  };
})();
