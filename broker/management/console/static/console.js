// The qpidd console: live snapshots over server-sent events, the cluster and fail-over
// pages, the confirmation dialog and the calls to the management API. Tables of queues,
// exchanges, connections and users are in tables.js.
"use strict";

const HEADER = "X-Qpidd-Console";
// A backup that leaves replication batches unacknowledged this long (s) is lagging.
const LAG_SILENCE = 1.0;
const PAGES = ["cluster", "timeline", "queues", "exchanges", "connections", "users"];
const state = { snapshot: null, renderers: {}, pending: null };

function $(id) { return document.getElementById(id); }

function el(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "text") element.textContent = value;
    else if (key.startsWith("on")) element.addEventListener(key.slice(2), value);
    else element.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    element.appendChild(typeof child === "string" || typeof child === "number" ? document.createTextNode(String(child)) : child);
  }
  return element;
}

function replaceRows(tbody, rows) {
  tbody.replaceChildren(...rows);
}

function fmt(value) {
  if (value === null || value === undefined) return "-";
  if (typeof value === "number") return Number.isInteger(value) ? value.toLocaleString("en") : value.toFixed(1);
  return String(value);
}

function bytesText(n) {
  if (n === null || n === undefined) return "-";
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

function timeOf(seconds) {
  if (seconds === null || seconds === undefined) return "-";
  const d = new Date(seconds * 1000);
  return d.toLocaleTimeString("en-GB", { hour12: false }) + "." + String(d.getMilliseconds()).padStart(3, "0");
}

function argsText(args) {
  const keys = Object.keys(args || {});
  return keys.length ? keys.map((k) => `${k}=${JSON.stringify(args[k])}`).join(", ") : "";
}

function roles() { return (state.snapshot && state.snapshot.me && state.snapshot.me.roles) || []; }
function canAdmin() { return roles().includes("administrator"); }
function canSteer() { return roles().includes("cluster-manager"); }

function toast(text, error = false) {
  const box = $("toast");
  box.textContent = text;
  box.className = error ? "toast error" : "toast";
  clearTimeout(state.toastTimer);
  state.toastTimer = setTimeout(() => { box.className = "toast hidden"; }, 8000);
}

async function api(method, path, body) {
  const options = { method, credentials: "same-origin", headers: { [HEADER]: "1" } };
  if (body !== undefined) {
    options.headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(body);
  }
  const response = await fetch(path, options);
  let data = null;
  try { data = await response.json(); } catch (e) { data = null; }
  if (response.status === 401) { window.location.assign("/console/login"); }
  if (!response.ok) throw new Error((data && data.reason) || `HTTP ${response.status}`);
  return data;
}

// A change the user asked for: confirm first, then call, then say what happened.
function confirmThen(text, action) {
  $("confirm-text").textContent = text;
  $("confirm").className = "modal";
  state.pending = action;
}

function closeConfirm() {
  $("confirm").className = "modal hidden";
  state.pending = null;
}

async function runAction(action) {
  try {
    toast(await action());
  } catch (error) {
    toast(`refused: ${error.message}`, true);
  }
}

// -- navigation ----------------------------------------------------------------------------
function currentPage() {
  const page = window.location.hash.replace("#", "");
  return PAGES.includes(page) ? page : "cluster";
}

function showPage() {
  const page = currentPage();
  for (const name of PAGES) {
    $(`page-${name}`).className = name === page ? "page shown" : "page";
  }
  for (const link of document.querySelectorAll("#tabs a")) {
    link.className = link.dataset.page === page ? "active" : "";
  }
  render();
}

// -- header and cluster --------------------------------------------------------------------
function renderBanner(s) {
  const banner = $("role-banner");
  const ha = s.ha;
  const node = s.status.node;
  if (!ha) {
    banner.textContent = `STAND-ALONE broker ${node} (not in an HA cluster)`;
    banner.className = "banner other";
  } else if (ha.state === "active" || ha.state === "recovering") {
    banner.textContent = `PRIMARY: ${node} (${ha.url}), epoch ${ha.epoch}, ${ha.state}`;
    banner.className = "banner primary";
  } else {
    banner.textContent = `BACKUP ${node} (${ha.state}): the primary is ${ha.primary ? "at " + ha.primary : "not known yet"}`;
    banner.className = "banner backup";
  }
  const me = s.me || {};
  $("me").textContent = me.auth ? `${me.user} (${(me.roles || []).join(", ") || "no role"})` : "authentication off";
  $("logout-form").className = me.auth ? "" : "hidden";
}

// The agent whose member record is this broker's (by broker id, else by URL).
function agentOf(s, m) {
  const agents = s.agents;
  if (!agents || !agents.members) return null;
  return agents.members.find((a) => (m.id && a.broker_id === m.id)) || agents.members.find((a) => a.url === m.url) || null;
}

function renderAgents(s) {
  const box = $("agents");
  const agents = s.agents;
  if (agents === undefined || agents === null) {
    box.textContent = s.ha ? "The agents' view is not read here: start the brokers with --console-zk HOSTS --console-cluster NAME (or: qpid-ha --zk HOSTS --cluster NAME status --all)." : "";
    return;
  }
  const parts = [];
  if (agents.primary) parts.push(`primary record ${agents.primary} at epoch ${agents.primary_epoch}`);
  else parts.push("no primary record");
  parts.push(agents.vip ? `virtual IP ${agents.vip} held by ${agents.primary}` : "no virtual IP");
  if (agents.epoch !== undefined && agents.epoch !== null) parts.push(`last epoch handed out ${agents.epoch}`);
  parts.push(`${(agents.members || []).length} member records`);
  if (agents.error) parts.push(`(${agents.stale ? "last read shown; " : ""}${agents.error})`);
  box.textContent = `Agents (ZooKeeper, cluster ${agents.cluster}): ${parts.join(" · ")}`;
}

function memberRows(s) {
  const ha = s.ha;
  const members = (ha.members || []).map((m) => ({ ...m }));
  if (!members.some((m) => m.id === ha.broker_id)) {
    members.push({ id: ha.broker_id, url: ha.url, state: ha.state });
  }
  // every address of ha-brokers-url: one no member answers for is shown, not left out
  for (const address of s.configured_members || []) {
    if (!members.some((m) => m.url === address)) members.push({ id: "", url: address, state: "not connected" });
  }
  const backups = Object.fromEntries((ha.backups || []).map((b) => [b.id, b]));
  // an in-sync backup that went away: the primary holds its confirms until the cluster
  // manager (its agent) commits the in-sync set without it
  const pendingRemoval = new Set((ha.in_sync && ha.in_sync.pending_removal) || []);
  const isPrimary = (m) => m.state === "active" || m.state === "recovering";
  members.sort((a, b) => (isPrimary(b) - isPrimary(a)) || String(a.url).localeCompare(String(b.url)));
  return members.map((m) => {
    const self = m.id === ha.broker_id;
    const backup = backups[m.id];
    const lags = (backup && backup.queues) || [];
    const totalLag = lags.reduce((sum, q) => sum + (q.lag || 0), 0);
    const silent = (s.unacknowledged_for || {})[m.id] || 0;
    const primaryHere = ha.state === "active" || ha.state === "recovering";
    const gone = pendingRemoval.has(m.id);
    const missing = m.state === "not connected" || gone;
    const lagging = !isPrimary(m) && !missing && (["joining", "catch-up"].includes(m.state) ||
      (primaryHere && (!backup || !backup.in_sync || !backup.ready || totalLag > 0 || silent >= LAG_SILENCE)));
    const history = (s.lag_history || {})[m.id] || {};
    const lagCell = el("td", {});
    if (isPrimary(m)) lagCell.appendChild(el("span", { class: "note", text: "(the primary: the others lag behind it)" }));
    else if (gone) lagCell.appendChild(el("span", { class: "note", text: "gone: its confirms are held until the in-sync set is committed without it (qpid-ha in-sync --commit, or its agent)" }));
    else if (missing) lagCell.appendChild(el("span", { class: "note", text: "no member answers at this address of ha-brokers-url" }));
    else if (!backup) lagCell.appendChild(el("span", { class: "note", text: ha.state === "active" || ha.state === "recovering" ? "not linked" : "on the primary's console" }));
    else if (!lags.length) lagCell.appendChild(el("span", { class: "note", text: "no replicated queue" }));
    for (const q of lags) {
      const series = history[q.queue] || [q.lag];
      lagCell.appendChild(el("span", { class: "lag", "data-queue": q.queue },
        el("span", { text: `${q.queue}: ${fmt(q.lag)}${q.lag ? ` (${bytesText(q.lag_bytes)}${q.lag_bytes_partial ? "+" : ""})` : ""}` }),
        charts.sparkline(series, { color: q.lag > 0 ? "#b45309" : "#2563a8" })));
    }
    const inSync = isPrimary(m) ? "-" : backup ? (backup.in_sync ? "yes" : "no") : "-";
    const agentRecord = agentOf(s, m);
    const agentCell = el("td", { class: "agent", text: agentRecord ? `${agentRecord.node}: ${agentRecord.state}${s.agents.primary === agentRecord.node ? " (primary record)" : ""}${s.agents.vip && s.agents.primary === agentRecord.node ? `, holds VIP ${s.agents.vip}` : ""}` : "-" });
    const why = silent >= LAG_SILENCE ? ` (no acknowledgement for ${silent} s)` : !backup && primaryHere ? " (not linked)" : "";
    const role = isPrimary(m) ? el("span", { class: "tag primary", text: "PRIMARY" })
      : gone ? el("span", { class: "tag lag", text: "GONE, pending removal from the in-sync set" })
      : missing ? el("span", { class: "tag lag", text: "NOT CONNECTED (down, or cut off)" })
      : el("span", { class: lagging ? "tag lag" : "tag", text: lagging ? `backup, LAGGING${why}` : "backup" });
    const rowClass = [isPrimary(m) ? "is-primary" : "", lagging ? "lagging" : "", missing ? "down" : ""].join(" ").trim();
    return el("tr", { class: rowClass || null, "data-member": m.url, "data-state": m.state },
      el("td", {}, el("span", { text: m.url }), self ? el("span", { class: "note", text: ` (this broker, ${s.status.node})` }) : null,
        el("div", { class: "args", text: m.id })),
      el("td", {}, el("span", { class: `pill ${missing ? "down" : m.state}`, text: gone ? "gone" : m.state })),
      el("td", {}, role),
      el("td", { class: "num", text: self ? fmt(ha.epoch) : agentRecord ? fmt(agentRecord.epoch) : isPrimary(m) || backup ? fmt(ha.epoch) : "-" }),
      el("td", { text: inSync }),
      agentCell,
      lagCell);
  });
}

function renderCluster(s) {
  const card = $("primary-card");
  const ha = s.ha;
  if (!ha) {
    card.replaceChildren(el("div", { class: "big", text: `Stand-alone broker ${s.status.node}` }),
      el("div", { class: "facts", text: "not an HA cluster member: no other members, no fail-overs" }));
    replaceRows($("members").tBodies[0], []);
    return;
  }
  const primary = ha.state === "active" || ha.state === "recovering";
  const facts = [`epoch ${ha.epoch}`, `broker id ${ha.broker_id}`, `cluster URL ${ha.public_url || "-"}`];
  if (primary) {
    facts.push(`held confirms ${ha.held_confirms}`, `lease ${ha.lease_remaining === null ? "none" : ha.lease_remaining + " s"}`);
    const inSync = ha.in_sync || {};
    const committed = inSync.committed ? `${inSync.committed.members.length} committed at epoch ${inSync.committed.epoch}` : "none committed";
    facts.push(`in-sync set: ${committed}, ${(inSync.pending_removal || []).length} pending removal`);
  } else if (ha.link_error) {
    facts.push(`link: ${ha.link_error.reason}`);
  }
  card.replaceChildren(
    el("div", { class: "big", id: "primary-name", text: primary ? `Primary: this broker, ${s.status.node} (${ha.url})` : `The primary is ${ha.primary ? "at " + ha.primary : "not known yet"}` }),
    el("div", { class: "facts", text: facts.join(" · ") }));
  replaceRows($("members").tBodies[0], memberRows(s));
  renderAgents(s);
  $("cluster-note").textContent = "Members as this broker knows them (the primary knows every backup, " +
    "a backup what the primary last told it), and every address of ha-brokers-url.";
  renderClusterActions(s);
}

function renderClusterActions(s) {
  const box = $("cluster-actions");
  if (!canSteer() || !s.ha) { box.replaceChildren(); return; }
  if (box.dataset.state === `${s.ha.state}/${s.ha.broker_id}`) return;
  box.dataset.state = `${s.ha.state}/${s.ha.broker_id}`;
  const node = s.status.node;
  const buttons = [];
  if (s.ha.state === "ready") {
    buttons.push(el("button", { id: "promote", class: "danger", onclick: () => confirmThen(
      `Promote ${node} to primary? Only when no agent manages this cluster: the agents promote by themselves, with the next epoch from ZooKeeper.`,
      async () => { const r = await api("POST", "/api/ha/promote", { cluster_manager: true }); return `promoted ${node}: ${r.state}, epoch ${r.epoch}`; }) }, "Promote this broker"));
  }
  buttons.push(el("button", { id: "shutdown", class: "danger", onclick: () => confirmThen(
    `Shut down ${node}? It stops as on SIGTERM; a broker an agent supervises is started again by its agent.`,
    async () => { const r = await api("POST", "/api/admin/stop", { broker_id: s.ha.broker_id }); return `${node} is stopping (pid ${r.pid})`; }) }, "Shut down this broker"));
  box.replaceChildren(...buttons);
}

// -- fail-over timeline --------------------------------------------------------------------
const PHASE_NAMES = ["detection", "election", "promotion", "recovering", "failover"];

// the outage as the new primary saw its clients come back (common/failover_phases.py)
function outageText(f) {
  if (f.client_outage_ms !== null) {
    const until = f.client_outage_until === "client_confirmed" ? "first client confirm" : "first client connection; no confirm yet";
    return `${fmt(f.client_outage_ms)} ms (to the ${until})`;
  }
  if (f.seen_by !== "new primary") return "— (the new primary's console)";
  return f.instants.failure === null || f.instants.failure === undefined ? "-" : "— (no client back yet)";
}

function renderTimeline(s) {
  const box = $("timeline");
  const failovers = s.timeline || [];
  if (!failovers.length) {
    box.replaceChildren(el("p", { class: "note", id: "no-failover", text: "No fail-over seen since this broker started." }));
    return;
  }
  box.replaceChildren(...failovers.map((f) => {
    const head = f.initial
      ? `Epoch ${f.epoch}: first primary ${f.new_primary} (initial election)`
      : `Epoch ${f.epoch}: ${f.old_primary} → ${f.new_primary}`;
    const instants = Object.entries(f.instants).filter(([, v]) => v !== null)
      .sort((a, b) => a[1] - b[1]).map(([k, v]) => `${k} ${timeOf(v)}`).join(" · ");
    const rows = PHASE_NAMES.map((name) => {
      const ms = f.phases_ms[name];
      return el("tr", { "data-phase": name }, el("th", { text: name }),
        el("td", { text: ms === null ? "— (agents' logs)" : `${fmt(ms)} ms` }));
    });
    rows.splice(2, 0, el("tr", { "data-phase": "until_won" }, el("th", { text: "until won (detection + election)" }),
      el("td", { text: f.until_won_ms === null ? "— (this node's agent's log)" : `${fmt(f.until_won_ms)} ms` })));
    rows.splice(4, 0, el("tr", { "data-phase": "until_promoted" }, el("th", { text: "until promoted (detection + election + promotion)" }),
      el("td", { text: f.until_promoted_ms === null ? "-" : `${fmt(f.until_promoted_ms)} ms` })));
    rows.push(el("tr", { "data-phase": "client_outage" }, el("th", { text: "client outage (failure to the clients back)" }),
      el("td", { text: outageText(f) })));
    const split = f.until_won_ms !== null && f.phases_ms.promotion !== null;
    const segments = split
      ? [["until", "until won", f.until_won_ms], ["promo", "promotion", f.phases_ms.promotion], ["recov", "recovering", f.phases_ms.recovering]]
      : [["until", "until promoted", f.until_promoted_ms], ["recov", "recovering", f.phases_ms.recovering]];
    const total = segments.reduce((sum, [, , ms]) => sum + (ms || 0), 0);
    // one scale for the phases and the client outage: which was longer shows
    const scale = Math.max(total, f.client_outage_ms || 0);
    const bar = el("div", { class: "bar" });
    if (scale > 0) {
      for (const [kind, title, ms] of segments) {
        const part = el("div", { class: kind, title: `${title} ${fmt(ms || 0)} ms` });
        part.style.width = `${(100 * (ms || 0)) / scale}%`;
        bar.appendChild(part);
      }
    }
    const outageBar = el("div", { class: "bar outage-bar" });
    if (scale > 0 && f.client_outage_ms !== null) {
      const part = el("div", { class: "outage", title: `client outage ${fmt(f.client_outage_ms)} ms` });
      part.style.width = `${(100 * f.client_outage_ms) / scale}%`;
      outageBar.appendChild(part);
    }
    const legend = el("div", { class: "legend" },
      ...segments.map(([kind, title]) => el("span", {}, el("i", { class: kind }), title)),
      el("span", {}, el("i", { class: "outage" }), "client outage"));
    return el("div", { class: "failover", "data-epoch": f.epoch },
      el("div", { class: "head", text: head }),
      el("div", { class: "note", text: `seen by this broker as the ${f.seen_by}; ${instants}` }),
      bar, outageBar, legend, el("table", { class: "phases" }, el("tbody", {}, ...rows)));
  }));
}

// -- live updates --------------------------------------------------------------------------
function render() {
  const s = state.snapshot;
  if (!s) return;
  renderBanner(s);
  const page = currentPage();
  if (page === "cluster") renderCluster(s);
  else if (page === "timeline") renderTimeline(s);
  else if (state.renderers[page]) state.renderers[page](s);
}

function connect() {
  const source = new EventSource("/api/console/live");
  source.addEventListener("snapshot", (event) => {
    state.snapshot = JSON.parse(event.data);
    $("live").className = "live";
    render();
  });
  source.onerror = () => {
    $("live").className = "live off";
    if (source.readyState === EventSource.CLOSED) {
      fetch("/console/static/console.css", { credentials: "same-origin" }).then((r) => {
        if (r.status === 401) window.location.assign("/console/login");
        else setTimeout(connect, 1000);
      }, () => setTimeout(connect, 1000));
    }
  };
}

document.addEventListener("DOMContentLoaded", () => {
  $("confirm-cancel").addEventListener("click", closeConfirm);
  $("confirm-ok").addEventListener("click", () => {
    const action = state.pending;
    closeConfirm();
    if (action) runAction(action);
  });
  window.addEventListener("hashchange", showPage);
  showPage();
  connect();
});

window.consoleApp = { state, el, api, fmt, argsText, confirmThen, runAction, replaceRows, canAdmin, toast, $ };
