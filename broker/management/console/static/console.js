// The qpidd console: live snapshots over server-sent events, the header (the broker's role,
// or why what is shown is not the present), the confirmation dialog and the calls to the
// management API. The cluster and fail-over pages are in cluster.js; the tables of
// queues, exchanges, connections and users in tables.js.
"use strict";

const HEADER = "X-Qpidd-Console";
// The live stream sends a delta every second: none for this long (s) and the page says
// its broker is not answering (paused, too busy or cut off) and shows its last state as such.
const STALE_AFTER = 3.5;
const PAGES = ["overview", "cluster", "timeline", "queues", "exchanges", "connections", "channels", "consumers", "users"];
// lastEventAt: when the stream last said anything; lostAt: when it broke (the broker
// killed, stopped or cut off); stopped: the broker said it stops, and why (fenced...)
const state = { snapshot: null, renderers: {}, pending: null, lastEventAt: Date.now(), lostAt: null, stopped: null };

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
// Where changes to queues and messages can work: a stand-alone broker or the primary (a
// backup refuses them, 409 naming the primary). Null when they can, else why not.
function changesRefused() {
  const ha = state.snapshot && state.snapshot.ha;
  if (!ha || ha.state === "active" || ha.state === "recovering") return null;
  return `This broker is a backup (${ha.state}): purge, delete, publish and get are the primary's${ha.primary ? " (its console: the primary at " + ha.primary + ")" : " (no primary is reachable now)"}.`;
}

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
  if (response.status === 401) { window.location.assign("/console/login?ended=session"); }
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
    toast(`refused: ${error.message.replace(/^refused: /, "")}`, true);
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

// -- header --------------------------------------------------------------------------
// Whether what the page shows is the present: null while the stream is live, else why
// not (the broker said it stops, the stream broke, or it has been silent).
function staleness() {
  if (state.stopped) return "stopped";
  if (state.lostAt) return "unreachable";
  if ((Date.now() - state.lastEventAt) / 1000 >= STALE_AFTER) return "silent";
  return null;
}

function clockTime(ms) { return timeOf(ms / 1000).replace(/\.\d+$/, ""); }

function renderBanner(s) {
  const banner = $("role-banner");
  const ha = s.ha;
  const node = s.status.node;
  const stale = staleness();
  document.body.classList.toggle("stale", Boolean(stale));
  const asOf = `Below: its last state, as of ${timeOf(s.at).replace(/\.\d+$/, "")}, not the present.`;
  if (stale === "stopped") {
    banner.textContent = `STOPPED: ${node}: ${state.stopped.reason} (at ${clockTime(state.stopped.at)}). ${asOf}`;
    banner.className = "banner down";
  } else if (stale === "unreachable") {
    banner.textContent = `UNREACHABLE: ${node} has not answered since ${clockTime(state.lostAt)} (killed, stopped or cut off; another member's console shows the cluster now). ${asOf}`;
    banner.className = "banner down";
  } else if (stale === "silent") {
    banner.textContent = `NO UPDATE from ${node} for ${Math.round((Date.now() - state.lastEventAt) / 1000)} s (paused, too busy or cut off). ${asOf}`;
    banner.className = "banner down";
  } else if (!ha) {
    banner.textContent = `STAND-ALONE broker ${node} (not in an HA cluster)`;
    banner.className = "banner other";
  } else if (ha.state === "active" || ha.state === "recovering") {
    banner.textContent = `PRIMARY: ${node} (${ha.url}), epoch ${ha.epoch}, ${ha.state}`;
    banner.className = "banner primary";
  } else if (ha.primary) {
    banner.textContent = `BACKUP ${node} (${ha.state}): the primary is at ${ha.primary}`;
    banner.className = "banner backup";
  } else {
    const link = ha.link_error ? ` (${hostPort(ha.link_error.address)}: ${ha.link_error.reason})` : "";
    banner.textContent = `BACKUP ${node} (${ha.state}): NO PRIMARY reachable${link}`;
    banner.className = "banner backup no-primary";
  }
  const me = s.me || {};
  $("me").textContent = me.auth ? `${me.user} (${(me.roles || []).join(", ") || "no role"})` : "authentication off";
  $("logout-form").className = me.auth ? "" : "hidden";
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

// The live stream (lists.js's consoleLists holds the pages of the lists): a snapshot and
// the viewer's pages first, then each second the pages that changed and a delta. Opened
// again when a table's query changes.
let source = null;

function connect() {
  const lists = window.consoleLists;
  if (source) source.close();
  const mine = new EventSource("/api/console/live" + lists.query());
  source = mine;
  const show = (snapshot) => {
    state.snapshot = snapshot;
    state.lastEventAt = Date.now();
    state.lostAt = null;
    state.stopped = null;
    $("live").className = "live";
    render();
  };
  mine.addEventListener("snapshot", (event) => show(lists.snapshot(JSON.parse(event.data))));
  // whole pages come just after a snapshot: drawn at once on the list pages (each delta
  // draws the page shown again)
  mine.addEventListener("page", (event) => {
    if (lists.page(JSON.parse(event.data)) && !["overview", "cluster", "timeline"].includes(currentPage())) show(lists.view());
  });
  mine.addEventListener("delta", (event) => show(lists.delta(JSON.parse(event.data))));
  // the broker stops, and says why (fenced, refused, an operator's stop)
  mine.addEventListener("stopping", (event) => {
    state.stopped = { ...JSON.parse(event.data), at: Date.now() };
    render();
  });
  mine.onerror = () => {
    if (mine !== source) return;
    $("live").className = "live off";
    if (!state.lostAt) { state.lostAt = Date.now(); render(); }
    if (mine.readyState === EventSource.CLOSED) {
      fetch("/console/static/console.css", { credentials: "same-origin" }).then((r) => {
        if (r.status === 401) window.location.assign("/console/login?ended=session");
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
  // the banner says when the page stopped hearing from its broker, stream or no stream
  setInterval(() => { if (state.snapshot && staleness()) renderBanner(state.snapshot); }, 1000);
});

window.consoleApp = { state, el, api, fmt, argsText, confirmThen, runAction, replaceRows, canAdmin, changesRefused, toast, $, connect, render };
