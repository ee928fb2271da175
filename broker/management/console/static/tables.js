// The console's object pages: queues (a page of them, filtered and sorted by the server,
// with charts and actions), exchanges and bindings, connections (a page of each, filtered
// and paged by the server); users are admin.js's. Registered as
// renderers with console.js; the lists they show are held by lists.js.
"use strict";

(function () {
  const app = window.consoleApp;
  const { el, api, fmt, argsText, confirmThen, runAction, replaceRows, canAdmin, changesRefused, $ } = app;
  const enc = encodeURIComponent;
  let selectedQueue = null;
  let builtFor = null;

  // A queue is known by its vhost and name (two vhosts may hold queues of the same name).
  const queueId = (q) => JSON.stringify([q.vhost || "/", q.name]);
  // The ?vhost= of an action on an object outside "/".
  const inVhost = (vhost) => (vhost && vhost !== "/" ? `?vhost=${enc(vhost)}` : "");

  function queueRow(q) {
    const history = q.history || [];
    return el("tr", { class: `clickable${queueId(q) === selectedQueue ? " selected" : ""}`, "data-queue": q.name, "data-vhost": q.vhost || "/",
      onclick: () => { selectedQueue = queueId(q); app.state.renderers.queues(app.state.snapshot); } },
      el("td", { text: q.name }),
      el("td", { class: "vhost", text: q.vhost || "/" }),
      el("td", { class: "num ready", text: fmt(q.messages) }),
      el("td", { class: "num unacked", text: fmt(q.messages_unacked) }),
      el("td", {}, charts.scaledSparkline(history.map((p) => p.messages), "msgs")),
      el("td", { class: "num", text: fmt(q.publish_rate) }),
      el("td", { class: "num", text: fmt(q.deliver_rate) }),
      el("td", { class: "num", text: fmt(q.ack_rate) }),
      el("td", { class: "num", text: fmt(q.consumers) }),
      el("td", { text: q.replication || "-" }),
      el("td", { class: "args", text: argsText(q.arguments) }));
  }

  function queueActions(name, vhost) {
    const vq = inVhost(vhost);
    const path = vhost && vhost !== "/" ? `/api/queues/${enc(vhost)}/${enc(name)}` : `/api/queues/${enc(name)}`;
    if (!canAdmin()) {
      return el("p", { class: "note", id: "queue-actions-none", text: "Purge, delete, publish and get need the administrator role." });
    }
    const refused = changesRefused();
    if (refused) return el("p", { class: "note", id: "queue-actions-none", text: refused });
    const payload = el("input", { id: "queue-payload", placeholder: "test message", value: "hello from the console" });
    const box = el("div", { id: "queue-actions" },
      el("div", { class: "actions" },
        el("button", { id: "purge", class: "danger", onclick: () => confirmThen(`Purge the ready messages of queue ${name}?`,
          async () => { const r = await api("DELETE", `/api/queues/${enc(name)}/contents${vq}`); return `purged ${r.messages_purged} messages from ${name}`; }) }, "Purge"),
        el("button", { id: "delete-queue", class: "danger", onclick: () => confirmThen(`Delete queue ${name} with its messages and bindings?`,
          async () => { const r = await api("DELETE", path); selectedQueue = null; return `deleted queue ${name} (${r.messages_deleted} messages)`; }) }, "Delete"),
        ),
      el("form", { class: "inline", onsubmit: (event) => { event.preventDefault(); runAction(async () => {
        const r = await api("POST", `/api/exchanges/amq.default/publish${vq}`, { routing_key: name, payload: payload.value });
        return r.routed ? `published a test message to ${name}` : `the message was not routed`;
      }); } }, payload, el("button", { id: "publish-to-queue", type: "submit" }, "Publish to this queue")));
    return box;
  }

  // The queue table's query (filter, sort, page): held by lists.js, answered by the server
  // (the live stream's page); a change opens the stream again. A filter is first tried on
  // GET /api/queues, whose 400 names what is wrong with it.
  const lists = window.consoleLists;
  const query = lists.queueQuery;

  function requery() { app.connect(); }

  let filterTimer = null;
  function filterChanged() {
    clearTimeout(filterTimer);
    filterTimer = setTimeout(async () => {
      const name = $("queue-filter").value;
      const useRegex = $("queue-regex").checked;
      const box = $("queue-query-error");
      if (name) {
        try {
          await api("GET", `/api/queues?page=1&page_size=1&name=${enc(name)}${useRegex ? "&use_regex=true" : ""}`);
        } catch (error) {
          box.textContent = error.message;
          return;
        }
      }
      box.textContent = "";
      if (name === query.name && useRegex === query.use_regex) return;
      query.name = name;
      query.use_regex = useRegex;
      query.page = 1;
      requery();
    }, 300);
  }

  function wireQueueQuery() {
    $("queue-query").addEventListener("submit", (event) => { event.preventDefault(); filterChanged(); });
    $("queue-filter").addEventListener("input", filterChanged);
    $("queue-regex").addEventListener("change", filterChanged);
    $("queue-page-size").addEventListener("change", () => { query.page_size = Number($("queue-page-size").value); query.page = 1; requery(); });
    $("queue-prev").addEventListener("click", () => { if (query.page > 1) { query.page -= 1; requery(); } });
    $("queue-next").addEventListener("click", () => {
      const counts = (app.state.snapshot && app.state.snapshot.queuePage) || {};
      if (query.page < (counts.page_count || 1)) { query.page += 1; requery(); }
    });
    wireSort("queues", query);
  }

  // A click on a column's header sorts the table by it (the server sorts); again, the
  // other way. RabbitMQ's sort and sort_reverse.
  function wireSort(table, q) {
    for (const th of $(table).tHead.querySelectorAll("th[data-sort]")) {
      th.addEventListener("click", () => {
        const field = th.dataset.sort;
        if (q.sort === field) q.sort_reverse = !q.sort_reverse;
        else { q.sort = field; q.sort_reverse = false; }
        q.page = 1;
        requery();
      });
    }
  }

  function renderSort(table, q) {
    for (const th of $(table).tHead.querySelectorAll("th[data-sort]")) {
      const on = th.dataset.sort === q.sort;
      th.classList.toggle("sorted-asc", on && !q.sort_reverse);
      th.classList.toggle("sorted-desc", on && q.sort_reverse);
    }
  }

  function renderQueryState(s) {
    const counts = s.queuePage || {};
    const total = counts.total_count || 0;
    const shown = counts.filtered_count === total ? `${fmt(total)} queues` : `${fmt(counts.filtered_count || 0)} of ${fmt(total)} queues`;
    $("queue-page-info").textContent = `page ${counts.page || 1} of ${counts.page_count || 1} · ${shown}`;
    $("queue-prev").disabled = (counts.page || 1) <= 1;
    $("queue-next").disabled = (counts.page || 1) >= (counts.page_count || 1);
    renderSort("queues", query);
  }

  // A form built once for the role and the vhosts it offers (not at each render: what is
  // typed in it stays).
  function formFor(boxId, key, build) {
    const box = $(boxId);
    if (box.dataset.built === key) return;
    box.dataset.built = key;
    box.replaceChildren(...(key ? [build()] : []));
  }

  const vhostNames = (s) => (s.vhosts || []).map((v) => v.name).sort((a, b) => (a === "/" ? -1 : b === "/" ? 1 : a.localeCompare(b)));

  function renderQueues(s) {
    const queues = s.queues || [];
    const editable = canAdmin() && !changesRefused();
    formFor("queue-add", editable ? `q/${vhostNames(s).join("/")}` : "", () => window.consoleQueuePage.addQueueForm(vhostNames(s)));
    renderQueryState(s);
    replaceRows($("queues").tBodies[0], queues.map(queueRow));
    const detail = $("queue-detail");
    const q = queues.find((x) => queueId(x) === selectedQueue);
    if (!q) { detail.replaceChildren(); builtFor = null; return; }
    // built again when the broker's role changes (a backup offers no change)
    const built = `${queueId(q)}/${changesRefused()}`;
    if (builtFor !== built) {
      builtFor = built;
      const where = q.vhost && q.vhost !== "/" ? ` in vhost ${q.vhost}` : "";
      detail.replaceChildren(el("div", { class: "detail" },
        el("h2", { text: `Queue ${q.name}${where}` }), el("div", { class: "charts", id: "queue-charts" }),
        ...window.consoleQueuePage.queueDetail(q.name, q.vhost || "/"), queueActions(q.name, q.vhost)));
    }
    window.consoleQueuePage.refreshDetail(q.name, q.vhost || "/");
    const history = q.history || [];
    $("queue-charts").replaceChildren(
      charts.lineChart("depth (messages)", [
        { name: "ready", values: history.map((p) => p.messages) },
        { name: "unacked", values: history.map((p) => p.unacked) }]),
      charts.lineChart("rates (messages/s)", [
        { name: "publish", values: history.map((p) => p.publish) },
        { name: "deliver", values: history.map((p) => p.deliver) },
        { name: "ack", values: history.map((p) => p.ack) }]),
      el("div", { class: "chart" }, el("div", { class: "title", text: "facts" }),
        el("div", { text: `durable ${q.durable}, auto-delete ${q.auto_delete}, exclusive ${q.exclusive}` }),
        el("div", { text: `bytes ${fmt(q.bytes)}, enqueued ${fmt(q.enqueued_total)}, delivered ${fmt(q.delivered_total)}, acked ${fmt(q.acked_total)}` }),
        el("div", { text: `expired ${fmt(q.expired_total)}, dropped ${fmt(q.dropped_total)}, refused ${fmt(q.rejected_publishes)}` }),
        el("div", { text: `replication ${q.replication || "-"}` })));
  }

  let publishTo = null;
  let publishVhost = "/";

  // "Publish message" as RabbitMQ's exchange page has it: routing key, delivery mode,
  // headers and properties (JSON objects), payload.
  function renderPublishForm() {
    const box = $("publish-form");
    if (publishTo === null || !canAdmin() || changesRefused()) { box.replaceChildren(); return; }
    const key = el("input", { id: "publish-key", placeholder: "routing key" });
    const mode = el("select", { id: "publish-delivery-mode" }, el("option", { value: "1", text: "1 - Non-persistent" }), el("option", { value: "2", text: "2 - Persistent" }));
    const headers = el("input", { id: "publish-headers", placeholder: "headers, JSON: {\"x-match\": \"all\"}", size: 30 });
    const props = el("input", { id: "publish-properties", placeholder: "properties, JSON: {\"content_type\": \"text/plain\"}", size: 34 });
    const payload = el("textarea", { id: "publish-payload", placeholder: "payload", rows: 2, cols: 30 });
    payload.value = "test";
    const jsonObject = window.consoleQueuePage.jsonObject;
    box.replaceChildren(el("form", { class: "inline publish", onsubmit: (event) => { event.preventDefault(); runAction(async () => {
      const properties = { ...jsonObject(props.value, "properties"), delivery_mode: Number(mode.value) };
      const h = jsonObject(headers.value, "headers");
      if (Object.keys(h).length) properties.headers = h;
      const r = await api("POST", `/api/exchanges/${enc(publishTo || "amq.default")}/publish${inVhost(publishVhost)}`, { routing_key: key.value, payload: payload.value, properties });
      return r.routed ? `published to ${publishTo || "the default exchange"}: ${r.queues} queue(s)` : "published, but no queue took it (unroutable)";
    }); } }, el("strong", { text: `Publish message to ${publishTo || "(default)"} in vhost ${publishVhost}` }),
      el("label", {}, "Routing key ", key), el("label", {}, "Delivery mode ", mode), headers, props, payload,
      el("button", { type: "submit", id: "publish-send" }, "Publish message")));
  }

  const EXCHANGE_TYPES = ["direct", "fanout", "topic", "headers"];

  // "Add a new exchange" (RabbitMQ's words), under the exchange table.
  function addExchangeForm(vhosts) {
    const name = el("input", { id: "new-exchange-name", placeholder: "name", required: true });
    const vhost = el("select", { id: "new-exchange-vhost" }, ...vhosts.map((v) => el("option", { value: v, text: v })));
    const type = el("select", { id: "new-exchange-type" }, ...EXCHANGE_TYPES.map((t) => el("option", { value: t, text: t })));
    const durable = el("select", { id: "new-exchange-durability" }, el("option", { value: "true", text: "Durable" }), el("option", { value: "false", text: "Transient" }));
    return el("details", { class: "add-form" }, el("summary", { text: "Add a new exchange" }),
      el("form", { class: "inline", onsubmit: (event) => { event.preventDefault(); runAction(async () => {
        await api("PUT", `/api/exchanges/${enc(vhost.value)}/${enc(name.value)}`, { type: type.value, durable: durable.value === "true" });
        return `exchange ${name.value} (${type.value}) declared in vhost ${vhost.value}`;
      }); } }, el("label", {}, "Vhost ", vhost), el("label", {}, "Name ", name), el("label", {}, "Type ", type), durable,
        el("button", { type: "submit", id: "add-exchange-button" }, "Add exchange")));
  }

  function exchangeButtons(x) {
    if (!canAdmin() || x.internal || changesRefused()) return null;
    const vhost = x.vhost || "/";
    const publish = el("button", { class: "publish", onclick: () => { publishTo = x.name; publishVhost = vhost; renderPublishForm(); } }, "Publish...");
    if (x.builtin || !x.name) return publish;
    return el("span", {}, publish, " ", el("button", { class: "danger delete-exchange", onclick: () => confirmThen(
      `Delete exchange ${x.name} in vhost ${vhost} with its ${fmt(x.bindings)} binding(s)?`,
      async () => { await api("DELETE", `/api/exchanges/${enc(vhost)}/${enc(x.name)}`); if (publishTo === x.name) { publishTo = null; renderPublishForm(); } return `deleted exchange ${x.name}`; }) }, "Delete"));
  }

  // The exchanges', bindings' and connections' tables: a filter (a regular expression
  // with "regex") and pages, answered by the server like the queue table's.
  const PLURAL = { exchanges: "exchanges", bindings: "bindings", connections: "connections" };

  function wireListQuery(name) {
    const q = lists.queries[name];
    let timer = null;
    const changed = () => {
      clearTimeout(timer);
      timer = setTimeout(async () => {
        const filter = $(`${name}-filter`).value;
        const useRegex = $(`${name}-regex`).checked;
        const box = $(`${name}-query-error`);
        if (filter) {
          try {
            await api("GET", `/api/${name}?page=1&page_size=1&name=${enc(filter)}${useRegex ? "&use_regex=true" : ""}`);
          } catch (error) {
            box.textContent = error.message;
            return;
          }
        }
        box.textContent = "";
        if (filter === q.name && useRegex === q.use_regex) return;
        q.name = filter;
        q.use_regex = useRegex;
        q.page = 1;
        requery();
      }, 300);
    };
    $(`${name}-query`).addEventListener("submit", (event) => { event.preventDefault(); changed(); });
    $(`${name}-filter`).addEventListener("input", changed);
    $(`${name}-regex`).addEventListener("change", changed);
    $(`${name}-prev`).addEventListener("click", () => { if (q.page > 1) { q.page -= 1; requery(); } });
    $(`${name}-next`).addEventListener("click", () => {
      const counts = (app.state.snapshot && app.state.snapshot[`${name}Page`]) || {};
      if (q.page < (counts.page_count || 1)) { q.page += 1; requery(); }
    });
    wireSort(name, q);
  }

  function renderListQuery(s, name) {
    const counts = s[`${name}Page`] || {};
    const total = counts.total_count || 0;
    const shown = counts.filtered_count === total ? `${fmt(total)} ${PLURAL[name]}` : `${fmt(counts.filtered_count || 0)} of ${fmt(total)} ${PLURAL[name]}`;
    $(`${name}-page-info`).textContent = `page ${counts.page || 1} of ${counts.page_count || 1} · ${shown}`;
    $(`${name}-prev`).disabled = (counts.page || 1) <= 1;
    $(`${name}-next`).disabled = (counts.page || 1) >= (counts.page_count || 1);
    renderSort(name, lists.queries[name]);
  }

  function renderExchanges(s) {
    formFor("exchange-add", canAdmin() && !changesRefused() ? `x/${vhostNames(s).join("/")}` : "", () => addExchangeForm(vhostNames(s)));
    renderListQuery(s, "exchanges");
    renderListQuery(s, "bindings");
    replaceRows($("exchanges").tBodies[0], (s.exchanges || []).map((x) => el("tr", { "data-exchange": x.name, "data-vhost": x.vhost || "/" },
      el("td", { text: x.name || "(default)" }), el("td", { class: "vhost", text: x.vhost || "/" }), el("td", { text: x.type }), el("td", { text: x.durable ? "yes" : "no" }),
      el("td", { class: "num", text: fmt(x.bindings) }), el("td", { class: "num", text: fmt(x.routed_total) }),
      el("td", { class: "num", text: fmt(x.unroutable_total) }), el("td", { class: "args", text: argsText(x.arguments) }),
      el("td", {}, exchangeButtons(x)))));
    const unbinding = canAdmin() && !changesRefused();
    replaceRows($("bindings").tBodies[0], (s.bindings || []).map((b) => el("tr", { "data-source": b.source, "data-destination": b.destination, "data-key": b.routing_key },
      el("td", { class: "vhost", text: b.vhost || "/" }), el("td", { text: b.source || "(default)" }), el("td", { text: b.destination }), el("td", { text: b.destination_type }),
      el("td", { text: b.routing_key }), el("td", { class: "args", text: argsText(b.arguments) }),
      el("td", {}, unbinding && b.source ? unbindButton(b) : null))));
  }

  // Unbind (RabbitMQ's word) from the bindings list: the binding named by its properties key.
  function unbindButton(b) {
    const vhost = b.vhost || "/";
    const kind = b.destination_type === "exchange" ? "e" : "q";
    return el("button", { class: "danger unbind", onclick: () => confirmThen(
      `Unbind ${b.destination_type} ${b.destination} from exchange ${b.source} (routing key "${b.routing_key}") in vhost ${vhost}?`,
      async () => {
        await api("DELETE", `/api/bindings/${enc(vhost)}/e/${enc(b.source)}/${kind}/${enc(b.destination)}/${enc(b.properties_key)}`);
        return `unbound ${b.destination} from ${b.source}`;
      }) }, "Unbind");
  }

  let selectedConnection = null;
  // The selected connection's channels: a page of the live stream's channels list, those
  // whose name starts with the connection's name (a channel's name is "CONNECTION (N)").
  const CHANNEL_PAGE_SIZE = 100;
  const escapeRegex = (text) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

  function askChannels(connection, page) {
    lists.ask("channels", connection === null ? null : { page, page_size: CHANNEL_PAGE_SIZE,
      name: `^${escapeRegex(connection.name)} \\(`, use_regex: true, sort: "", sort_reverse: false });
    requery();
  }

  // Channels are AMQP 0-9-1's: an AMQP 1.0 connection's sessions are not listed.
  const hasChannels = (connection) => connection !== null && connection.protocol === "AMQP 0-9-1";

  function selectConnection(connection) {
    selectedConnection = connection === null ? null : connection.id;
    askChannels(hasChannels(connection) ? connection : null, 1);
  }

  // Leaving the Connections page stops the channels' page (the server builds channel rows
  // only while a viewer pages them).
  window.addEventListener("hashchange", () => {
    if (window.location.hash !== "#connections" && lists.queries.channels) selectConnection(null);
  });

  // A connection's data rate (RabbitMQ's recv_oct / send_oct rates: bytes a second at the
  // sampler's last tick), its total in the cell's title.
  function rateCell(cls, details, total, what) {
    const rate = details ? details.rate : null;
    return el("td", { class: `num ${cls}`, title: `${bytesText(total)} ${what} in all`,
      text: rate === null || rate === undefined ? "-" : `${bytesText(Math.round(rate))}/s` });
  }

  function renderConnections(s) {
    renderListQuery(s, "connections");
    const connections = s.connections || [];
    replaceRows($("connections").tBodies[0], connections.map((c) => el("tr", { "data-connection": c.id, "data-user": c.user || "",
      class: `clickable${c.id === selectedConnection ? " selected" : ""}`,
      onclick: () => { selectConnection(c); renderConnections(app.state.snapshot); } },
      el("td", { class: "num", text: c.id }),
      el("td", { class: "name" }, el("span", { text: c.peer }), c.user_provided_name ? el("div", { class: "client-name", text: c.user_provided_name }) : null),
      el("td", { class: "vhost", text: c.vhost || "/" }), el("td", { text: c.user || "-" }),
      el("td", { text: c.state }), el("td", { class: "tls", text: c.ssl ? "TLS" : "○" }), el("td", { class: "protocol", text: c.protocol }),
      el("td", {}, c.ha_backup ? el("span", { class: "tag ha-link", text: `HA replication link of backup ${c.ha_backup}` }) : [c.client_product, c.client_version].filter(Boolean).join(" ") || "-"),
      el("td", { class: "num channels", text: fmt(c.channels) }), el("td", { class: "num", text: c.heartbeat ? `${c.heartbeat} s` : "none" }),
      el("td", { class: "num", text: fmt(c.messages_published) }), el("td", { class: "num", text: fmt(c.messages_delivered) }),
      rateCell("recv-rate", c.recv_oct_details, c.recv_oct, "read from the client"), rateCell("send-rate", c.send_oct_details, c.send_oct, "written to it"),
      el("td", {}, canAdmin() ? el("button", { class: "danger", onclick: (event) => { event.stopPropagation(); confirmThen(closeText(c),
        async () => { await api("DELETE", `/api/connections/${c.id}`); return `closed connection ${c.id}`; }); } }, c.ha_backup ? "Close link" : "Close") : null))));
    renderChannels(s, connections.find((c) => c.id === selectedConnection));
  }

  // What closing a connection does: a client is told 320; a backup's replication link is
  // no client, and closing it costs that backup its place until it catches up again.
  function closeText(c) {
    if (!c.ha_backup) return `Close connection ${c.id} (${c.peer}, ${c.user || "no user"})? The client gets 320 CONNECTION_FORCED.`;
    return `WARNING: connection ${c.id} is the HA replication link of backup ${c.ha_backup}, not a client. Closing it cuts that backup off: it dials again and catches up, and while it is away the primary holds publisher confirms for it until its removal from the in-sync set is committed. Close it anyway?`;
  }

  // The selected connection's channels, from the live stream's page of them (drawn at
  // each snapshot; a page comes when one of its rows changed).
  function renderChannels(s, connection) {
    const box = $("connection-channels");
    if (selectedConnection === null) {
      box.replaceChildren(el("p", { class: "note", text: "Click a connection for its channels." }));
      return;
    }
    if (!connection) {
      if (lists.queries.channels) { lists.ask("channels", null); requery(); } // nothing to page
      box.replaceChildren(el("p", { class: "note", id: "channels-gone", text: `Connection ${selectedConnection} is closed, or not on this page of the list.` }));
      return;
    }
    if (!hasChannels(connection)) {
      box.replaceChildren(el("p", { class: "note", id: "channels-none", text: `Connection ${connection.id} is ${connection.protocol}: its ${fmt(connection.channels)} session(s) have no channels to list (channels are AMQP 0-9-1's).` }));
      return;
    }
    if (!lists.queries.channels) askChannels(connection, 1); // selected again after it went
    const id = connection.id;
    const counts = s.channelsPage || {};
    const channels = (s.channels || []).filter((ch) => ch.connection === id);
    if (counts.page === undefined) {
      box.replaceChildren(el("p", { class: "note", text: `Channels of connection ${id}: waiting for the broker...` }));
      return;
    }
    const mode = (ch) => [ch.confirm ? "confirm" : null, ch.transactional ? "transaction" : null].filter(Boolean).join(", ") || "-";
    const consumers = (ch) => ch.consumers.map((k) => `${k.consumer_tag} on ${k.queue}${k.ack_required ? "" : " (no ack)"}`).join("; ");
    const page = counts.page || 1, pages = counts.page_count || 1;
    const turn = (to) => () => askChannels(connection, to);
    box.replaceChildren(el("h3", { text: `Channels of connection ${id} (${connection.peer}, ${connection.user || "no user"})` }),
      el("div", { class: "actions", id: "channels-pages" },
        el("button", { type: "button", id: "channels-box-prev", disabled: page <= 1, onclick: turn(page - 1) }, "‹ Prev"),
        el("span", { class: "note", id: "channels-box-info", text: `page ${page} of ${pages} · ${fmt(counts.filtered_count || 0)} channels` }),
        el("button", { type: "button", id: "channels-box-next", disabled: page >= pages, onclick: turn(page + 1) }, "Next ›")),
      el("table", { class: "grid", id: "channels-table" },
        el("thead", {}, el("tr", {}, ...["Channel", "Prefetch", "Global prefetch", "Consumers", "Unacked", "Mode", "Unconfirmed", "Uncommitted", "State"].map((t) => el("th", { text: t })))),
        el("tbody", {}, ...channels.map((ch) => el("tr", { "data-channel": ch.number },
          el("td", { class: "num", text: ch.number }),
          el("td", { class: "num prefetch", text: ch.prefetch_count ? fmt(ch.prefetch_count) : "none" }),
          el("td", { class: "num", text: ch.global_prefetch_count ? fmt(ch.global_prefetch_count) : "none" }),
          el("td", { class: "consumers", title: consumers(ch), text: ch.consumer_count ? `${ch.consumer_count}: ${consumers(ch)}` : (ch.replication_stream ? "HA replication stream" : "0") }),
          el("td", { class: "num unacked", text: fmt(ch.messages_unacknowledged) }),
          el("td", { class: "mode", text: mode(ch) }),
          el("td", { class: "num", text: ch.confirm ? fmt(ch.messages_unconfirmed) : "-" }),
          el("td", { class: "num", text: ch.transactional ? `${fmt(ch.messages_uncommitted)} msgs, ${fmt(ch.acks_uncommitted)} acks` : "-" }),
          el("td", { text: ch.flow ? ch.state : `${ch.state}, flow stopped` }))))),
      ...(channels.length ? [] : [el("p", { class: "note", text: "No channel open." })]));
  }

  wireQueueQuery();
  for (const name of ["exchanges", "bindings", "connections"]) wireListQuery(name);
  app.state.renderers.queues = renderQueues;
  app.state.renderers.exchanges = (s) => { renderExchanges(s); if (!$("publish-form").firstChild) renderPublishForm(); };
  app.state.renderers.connections = renderConnections;
})();
