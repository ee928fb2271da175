// The console's queue page (a queue clicked in the queue table): its consumers and
// bindings (add and remove), get messages with RabbitMQ's ack modes, publish, purge and
// delete; and the "Add a new queue" form. Built by tables.js; each part refreshed from the
// API at most every second while shown, and at once after a change made here. Offered only where it can work: an administrator,
// on the primary (a backup refuses changes, 409 naming the primary).
"use strict";

(function () {
  const app = window.consoleApp;
  const { el, api, fmt, argsText, confirmThen, runAction, $ } = app;
  const enc = encodeURIComponent;
  const REFRESH_MS = 1000;
  // RabbitMQ's ack modes of "Get messages", with its words.
  const ACK_MODES = [
    ["ack_requeue_true", "Nack message requeue true"],
    ["ack_requeue_false", "Automatic ack"],
    ["reject_requeue_true", "Reject requeue true"],
    ["reject_requeue_false", "Reject requeue false"],
  ];
  const vq = (vhost) => (vhost && vhost !== "/" ? `?vhost=${enc(vhost)}` : "");
  const regexEscape = (text) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

  // A JSON object typed in a form ("" is none); an Error naming the field otherwise.
  function jsonObject(text, field) {
    if (!text.trim()) return {};
    let value;
    try { value = JSON.parse(text); } catch (e) { throw new Error(`${field}: not JSON (${e.message})`); }
    if (value === null || typeof value !== "object" || Array.isArray(value)) throw new Error(`${field}: must be a JSON object`);
    return value;
  }

  // "Add a new queue" (RabbitMQ's words), above the queue table.
  function addQueueForm(vhosts) {
    const name = el("input", { id: "new-queue-name", placeholder: "name", required: true });
    const vhost = el("select", { id: "new-queue-vhost" }, ...vhosts.map((v) => el("option", { value: v, text: v })));
    const durable = el("select", { id: "new-queue-durability" }, el("option", { value: "true", text: "Durable" }), el("option", { value: "false", text: "Transient" }));
    const args = el("input", { id: "new-queue-arguments", placeholder: "arguments, JSON: {\"x-max-length\": 1000}", size: 36 });
    return el("details", { id: "add-queue", class: "add-form" }, el("summary", { text: "Add a new queue" }),
      el("form", { class: "inline", onsubmit: (event) => { event.preventDefault(); runAction(async () => {
        const body = { durable: durable.value === "true", arguments: jsonObject(args.value, "arguments") };
        await api("PUT", `/api/queues/${enc(vhost.value)}/${enc(name.value)}`, body);
        return `queue ${name.value} declared in vhost ${vhost.value}`;
      }); } }, el("label", {}, "Vhost ", vhost), el("label", {}, "Name ", name), durable, args, el("button", { type: "submit", id: "add-queue-button" }, "Add queue")));
  }

  function consumersTable(consumers) {
    if (!consumers.length) return el("p", { class: "note", id: "queue-no-consumers", text: "No consumers." });
    return el("table", { class: "grid", id: "queue-consumers" },
      el("thead", {}, el("tr", {}, ...["Channel", "Consumer tag", "Ack required", "Exclusive", "Prefetch count", "Unacked"].map((t) => el("th", { text: t })))),
      el("tbody", {}, ...consumers.map((c) => el("tr", { "data-tag": c.consumer_tag },
        el("td", { text: c.channel_details.name }), el("td", { class: "tag-name", text: c.consumer_tag }),
        el("td", { text: c.ack_required ? "yes" : "no" }), el("td", { text: c.exclusive ? "yes" : "no" }),
        el("td", { class: "num", text: c.prefetch_count ? fmt(c.prefetch_count) : "none" }), el("td", { class: "num", text: fmt(c.unacked) })))));
  }

  function bindingsTable(name, vhost, bindings, editable) {
    return el("table", { class: "grid", id: "queue-bindings" },
      el("thead", {}, el("tr", {}, ...["From", "Routing key", "Arguments", ""].map((t) => el("th", { text: t })))),
      el("tbody", {}, ...bindings.map((b) => el("tr", { "data-source": b.source, "data-key": b.routing_key },
        el("td", { text: b.source || "(default exchange binding)" }), el("td", { class: "key", text: b.routing_key }),
        el("td", { class: "args", text: argsText(b.arguments) }),
        el("td", {}, editable && b.source ? el("button", { class: "danger unbind", onclick: () => confirmThen(
          `Unbind queue ${name} from exchange ${b.source} (routing key "${b.routing_key}")?`,
          async () => {
            await api("DELETE", `/api/bindings/${enc(vhost)}/e/${enc(b.source)}/q/${enc(name)}/${enc(b.properties_key)}`);
            refreshSoon(name, vhost);
            return `unbound ${name} from ${b.source}`;
          }) }, "Unbind") : null)))));
  }

  function addBindingForm(name, vhost) {
    const source = el("input", { id: "bind-source", placeholder: "from exchange" });
    const key = el("input", { id: "bind-key", placeholder: "routing key" });
    const args = el("input", { id: "bind-arguments", placeholder: "arguments, JSON (headers exchange)", size: 30 });
    return el("form", { class: "inline", id: "add-binding", onsubmit: (event) => { event.preventDefault(); runAction(async () => {
      await api("POST", `/api/bindings/${enc(vhost)}/e/${enc(source.value)}/q/${enc(name)}`, { routing_key: key.value, arguments: jsonObject(args.value, "arguments") });
      refreshSoon(name, vhost);
      return `bound ${name} to ${source.value} with "${key.value}"`;
    }); } }, el("strong", { text: "Add binding to this queue " }), source, key, args, el("button", { type: "submit", id: "bind-button" }, "Bind"));
  }

  function gotText(messages) {
    if (!messages.length) return "(the queue is empty)";
    return messages.map((m, i) => {
      const props = Object.keys(m.properties || {}).length ? `\n  properties: ${JSON.stringify(m.properties)}` : "";
      return `Message ${i + 1}: ${m.routing_key}: ${m.payload}${m.redelivered ? " (redelivered)" : ""}; ${fmt(m.message_count)} left${props}`;
    }).join("\n");
  }

  function getForm(name, vhost) {
    const got = el("pre", { class: "got hidden", id: "got" });
    const count = el("input", { id: "get-count", type: "number", min: 1, max: 100, value: 1, size: 4 });
    const mode = el("select", { id: "get-ackmode" }, ...ACK_MODES.map(([value, label]) => el("option", { value, text: label })));
    const form = el("form", { class: "inline", id: "get-form", onsubmit: (event) => { event.preventDefault(); runAction(async () => {
      const r = await api("POST", `/api/queues/${enc(name)}/get${vq(vhost)}`, { count: Number(count.value), ackmode: mode.value });
      got.className = "got";
      got.textContent = gotText(r);
      return `got ${r.length} message(s) from ${name}${mode.value.endsWith("requeue_true") ? ", put back" : ""}`;
    }); } }, el("strong", { text: "Get messages " }), el("label", {}, "Ack mode ", mode), el("label", {}, "Messages ", count),
      el("button", { type: "submit", id: "get-message" }, "Get Message(s)"));
    return [form, got];
  }

  // The parts of a queue's page (tables.js builds them once per queue and role).
  function queueDetail(name, vhost) {
    const editable = app.canAdmin() && !app.changesRefused();
    const parts = [
      el("h3", { text: "Consumers" }), el("div", { id: "queue-consumers-box" }, el("p", { class: "note", text: "..." })),
      el("h3", { text: "Bindings" }), el("div", { id: "queue-bindings-box" }, el("p", { class: "note", text: "..." })),
    ];
    if (editable) parts.push(addBindingForm(name, vhost));
    if (editable) parts.push(...getForm(name, vhost));
    return parts;
  }

  let refreshedFor = null;
  let refreshedAt = 0;

  // After a change made on the page: its tables again now, not at the next second.
  function refreshSoon(name, vhost) {
    refreshedAt = 0;
    refreshDetail(name, vhost);
  }

  // The consumers and bindings of the queue shown, again every second (the page renders
  // at each delta); a failure is said in the box.
  function refreshDetail(name, vhost) {
    const key = JSON.stringify([vhost, name]);
    if (refreshedFor === key && Date.now() - refreshedAt < REFRESH_MS) return;
    refreshedFor = key;
    refreshedAt = Date.now();
    const editable = app.canAdmin() && !app.changesRefused();
    const filter = `^${regexEscape(name)}$`;
    api("GET", `/api/consumers?use_regex=true&name=${enc(filter)}&page_size=500`).then((answer) => {
      const rows = (answer.items || answer).filter((c) => c.queue.name === name && (c.queue.vhost || "/") === vhost);
      const box = $("queue-consumers-box");
      if (box && refreshedFor === key) box.replaceChildren(consumersTable(rows));
    }, (error) => { const box = $("queue-consumers-box"); if (box) box.textContent = error.message; });
    api("GET", `/api/queues/${enc(vhost)}/${enc(name)}/bindings`).then((bindings) => {
      const box = $("queue-bindings-box");
      if (box && refreshedFor === key) box.replaceChildren(bindingsTable(name, vhost, bindings, editable));
    }, (error) => { const box = $("queue-bindings-box"); if (box) box.textContent = error.message; });
  }

  window.consoleQueuePage = { addQueueForm, queueDetail, refreshDetail, jsonObject };
})();
