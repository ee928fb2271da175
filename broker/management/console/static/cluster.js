// The console's cluster page (members, states, in-sync set, lag, the agents' view, what to
// do next, the cluster manager's actions) and its fail-over timeline. Drawn by console.js's
// render() from the live state; its helpers (el, fmt, state...) are console.js's.
"use strict";

// The lagging rule (docs/console.md): a backup is LAGGING when it has messages still to
// send in each of the last LAG_SAMPLES samples (a second apart: one late acknowledgement
// is not lag), or has left batches unacknowledged with nothing acknowledged for
// LAG_SILENCE s, or is catching up, not linked, or its replication failed.
const LAG_SAMPLES = 3;
const LAG_SILENCE = 2.0;
// The agents' view is read every 2 s; older than this (s), the page says how old.
const AGENTS_LATE = 6;

// "HOST:PORT" of an address however written ("amqp://user@HOST:PORT/vhost", "tcp:HOST:PORT").
function hostPort(url) {
  return String(url || "").replace(/^.*(\/\/|tcp:)/, "").replace(/^.*@/, "").replace(/\/.*$/, "");
}

// The node of each broker id and address an agent's record named once: an agent whose
// broker stopped answering records neither (state "down", its management address).
const knownNodes = new Map();

// The agent whose member record is this broker's (by broker id, else by address, else by
// the node that record had while its broker answered).
function agentOf(s, m) {
  const agents = s.agents;
  if (!agents || !agents.members) return null;
  const address = m.url ? hostPort(m.url) : "";
  const found = agents.members.find((a) => (m.id && a.broker_id === m.id)) ||
    (address ? agents.members.find((a) => hostPort(a.url) === address) : null);
  if (found) {
    if (m.id) knownNodes.set(m.id, found.node);
    if (address) knownNodes.set(address, found.node);
    return found;
  }
  const node = knownNodes.get(m.id) || knownNodes.get(address);
  return node ? agents.members.find((a) => a.node === node) || null : null;
}

// Seconds since the agents' view was read (0 when there is none).
function agentsAge(s) {
  const agents = s.agents;
  return agents && agents.read_at && s.at ? Math.round(s.at - agents.read_at) : 0;
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
  // read every 2 s: an older view says its age, so that it is not taken for the present
  const age = agentsAge(s);
  const late = age >= AGENTS_LATE ? `, read ${age} s ago` : "";
  box.classList.toggle("late", Boolean(late));
  box.textContent = `Agents (ZooKeeper, cluster ${agents.cluster}${late}): ${parts.join(" · ")}`;
  // the agents' own words: an engaged fence brake; without a primary, which broker is needed
  for (const alert of agents.alerts || []) box.appendChild(el("div", { class: "alert", text: alert }));
  // several clusters on one ZooKeeper (and one set of nodes): each one's primary, per node
  const clusters = agents.clusters || [];
  if (clusters.length > 1) {
    const list = el("ul", { class: "clusters" });
    for (const c of clusters) {
      const where = c.primary ? `primary ${c.primary} (epoch ${c.primary_epoch})${c.primary_url ? `, ${c.primary_url}` : ""}` : "no primary";
      list.appendChild(el("li", { text: `${c.cluster}${c.cluster === agents.cluster ? " (this cluster)" : ""}: ${where}` }));
    }
    const nodes = Object.entries(agents.per_node || {}).map(([n, k]) => `${n} ${k}`).join(", ");
    box.appendChild(el("div", { class: "clusters-head", text: `${clusters.length} clusters on this ZooKeeper; primaries per node: ${nodes || "none"}` }));
    box.appendChild(list);
  }
}

const IN_SYNC_HELP = "In-sync set: the backups the primary holds each publisher confirm for " +
  "until they have the message; only a member may be promoted. A member may lag: its lag is " +
  "messages not yet sent to it, whose confirms wait.";

// The in-sync set as the primary reports it (GET /api/ha "in_sync"): its members now and
// the ones gone, pending removal. The table and the header both read it from here.
function inSyncSet(ha) {
  const inSync = ha.in_sync || {};
  return { members: new Set(inSync.wanted || []), pendingRemoval: new Set(inSync.pending_removal || []) };
}

// A backup's short name: its agent's node, else its address, else its id.
function memberName(s, id) {
  const b = (s.ha.backups || []).find((x) => x.id === id);
  const agent = agentOf(s, { id, url: b ? b.url : "" });
  return agent ? agent.node : b ? b.url : id;
}

// The primary's in-sync set in one line, under the header's facts.
function inSyncSummary(s) {
  const set = inSyncSet(s.ha);
  // a member gone away is still a member (its confirms held) until its removal is committed
  const names = [...set.members, ...set.pendingRemoval].map((id) => memberName(s, id)).sort();
  const gone = [...set.pendingRemoval].map((id) => memberName(s, id)).sort();
  const parts = [names.length
    ? `In-sync set: ${names.join(", ")} (confirms wait for ${names.length === 1 ? "it" : names.length === 2 ? "both" : "all " + names.length})`
    : "In-sync set: no backup (confirms wait for none)"];
  if (gone.length) parts.push(`${gone.join(", ")} gone, pending removal from the set (its confirms held until then)`);
  const committed = s.ha.in_sync && s.ha.in_sync.committed;
  const title = IN_SYNC_HELP + (committed ? ` The cluster manager last committed a removal at epoch ${committed.epoch}.` : "");
  return el("div", { class: "facts in-sync-line", id: "in-sync-summary", title, text: parts.join(" · ") });
}

// The last n values of a series ([0] while shorter: not all n are known yet).
function lastSamples(series, n) {
  return series.length >= n ? series.slice(-n) : [0];
}

// The replication error a primary holds for this member (by broker id, else by address:
// a backup whose link the primary closed is no member until it links again).
function replicationError(ha, m) {
  const address = hostPort(m.url);
  return (ha.replication_errors || []).find((x) => (m.id && x.backup === m.id) || (x.url && hostPort(x.url) === address)) || null;
}

// The refusal a primary holds for the backup at this address (GET /api/ha refused_links).
function refusedLink(ha, m) {
  const address = hostPort(m.url);
  return (ha.refused_links || []).find((x) => hostPort(x.url) === address) || null;
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
  const histories = s.lag_history || {};
  // The in-sync set as the primary holds it (the header says the same, from the same
  // field): its members, and the ones that went away whose confirms it holds until the
  // cluster manager (its agent) commits the set without them.
  const set = inSyncSet(ha);
  const isPrimary = (m) => m.state === "active" || m.state === "recovering";
  members.sort((a, b) => (isPrimary(b) - isPrimary(a)) || String(a.url).localeCompare(String(b.url)));
  return members.map((m) => {
    const self = m.id === ha.broker_id;
    const backup = backups[m.id];
    const history = histories[m.id] || {};
    const lags = (backup && backup.queues) || [];
    const totalLag = lags.reduce((sum, q) => sum + (q.lag || 0), 0);
    const silent = (s.unacknowledged_for || {})[m.id] || 0;
    const primaryHere = ha.state === "active" || ha.state === "recovering";
    const gone = set.pendingRemoval.has(m.id);
    const member = set.members.has(m.id);
    const missing = m.state === "not connected" || gone;
    // why replication to this backup failed: which object, why (GET /api/ha, issue 24)
    const failed = primaryHere ? replicationError(ha, m) : null;
    // a backup whose link this primary refuses for its replication format (it dials again)
    const refused = primaryHere && m.state === "not connected" ? refusedLink(ha, m) : null;
    // on a backup whose link is down, the primary it last heard of is not reachable
    const lostPrimary = !primaryHere && !ha.primary && isPrimary(m);
    const behind = lags.some((q) => q.lag > 0 && lastSamples((history[q.queue] || []), LAG_SAMPLES).every((v) => v > 0));
    const lagging = !isPrimary(m) && !missing && (["joining", "catch-up"].includes(m.state) ||
      (primaryHere && (!backup || !member || !backup.ready || behind || silent >= LAG_SILENCE)));
    const lagCell = el("td", {});
    if (lostPrimary) lagCell.appendChild(el("span", { class: "note", text: `this backup's link to it is down${ha.link_error ? ": " + ha.link_error.reason : ""}` }));
    else if (isPrimary(m)) lagCell.appendChild(el("span", { class: "note", text: "(the primary: the others lag behind it)" }));
    else if (gone) lagCell.appendChild(el("span", { class: "note", text: "gone: its confirms are held until the in-sync set is committed without it (qpid-ha in-sync --commit, or its agent)" }));
    else if (missing && !failed) lagCell.appendChild(el("span", { class: "note", text: "no member answers at this address of ha-brokers-url" }));
    else if (!backup) lagCell.appendChild(el("span", { class: "note", text: ha.state === "active" || ha.state === "recovering" ? "not linked" : "on the primary's console" }));
    else if (!lags.length) lagCell.appendChild(el("span", { class: "note", text: "no replicated queue" }));
    if (refused) {
      lagCell.replaceChildren(el("div", { class: "tag lag refused-link", text: `refused: ${refused.reason} (${refused.count === 1 ? "once" : refused.count + " dials"} since ${refused.since})` }));
    }
    if (failed) {
      const e = failed;
      lagCell.prepend(el("div", { class: "tag lag replication-error", text: `replication error: ${e.reason} (${e.count === 1 ? "once" : e.count + " times"} since ${e.since})` }));
    }
    for (const q of lags) {
      // the last 60 s of samples, ending at the lag shown (a snapshot made between two
      // samples has a newer one): the scale's max is never below the value beside it
      const sampled = history[q.queue] || [];
      const series = sampled.length && sampled[sampled.length - 1] === q.lag ? sampled : [...sampled, q.lag];
      lagCell.appendChild(el("span", { class: "lag", "data-queue": q.queue },
        el("span", { text: `${q.queue}: ${fmt(q.lag)} ${q.lag === 1 ? "msg" : "msgs"}${q.lag ? ` (${bytesText(q.lag_bytes)}${q.lag_bytes_partial ? "+" : ""})` : ""}` }),
        charts.scaledSparkline(series, "msgs", { color: q.lag > 0 ? "#b45309" : "#2563a8" })));
    }
    const inSync = isPrimary(m) ? el("span", { class: "note", text: "-" })
      : primaryHere && failed && !member && !gone ? el("span", { class: "tag lag", text: "not a member (replication failed)", title: IN_SYNC_HELP })
      : !primaryHere || (missing && !gone) ? el("span", { class: "note", text: "-" })
      : gone ? el("span", { class: "tag lag", text: "member, gone: confirms held", title: IN_SYNC_HELP })
      : member ? el("span", { class: "in-set", text: "member", title: IN_SYNC_HELP }, el("span", { class: "note", text: " (confirms wait for it)" }))
      : el("span", { class: "tag lag", text: "not a member", title: IN_SYNC_HELP }, el("span", { class: "note", text: backup && !backup.ready ? " (catching up)" : "" }));
    const agentRecord = agentOf(s, m);
    const agentCell = el("td", { class: "agent", text: agentRecord ? `${agentRecord.node}: ${agentRecord.state}${s.agents.primary === agentRecord.node ? " (primary record)" : ""}${s.agents.vip && s.agents.primary === agentRecord.node ? `, holds VIP ${s.agents.vip}` : ""}${agentsAge(s) >= AGENTS_LATE ? ` (read ${agentsAge(s)} s ago)` : ""}` : "-" });
    // why it is LAGGING, each reason said (lag in messages first: what an operator weighs)
    const reasons = [];
    if (!backup && primaryHere) reasons.push("not linked");
    else if (!backup && ["joining", "catch-up"].includes(m.state)) reasons.push(m.state);
    if (behind) reasons.push(`${fmt(totalLag)} ${totalLag === 1 ? "msg" : "msgs"} behind`);
    if (silent >= LAG_SILENCE) reasons.push(`no acknowledgement for ${silent} s`);
    if (failed) reasons.push("replication error");
    if (backup && !backup.ready) reasons.push("catching up");
    if (backup && !member) reasons.push("not in the in-sync set");
    const why = reasons.length ? ` (${reasons.join(", ")})` : "";
    const role = lostPrimary ? el("span", { class: "tag lag", text: "PRIMARY when last heard; NOT REACHABLE now" })
      : isPrimary(m) ? el("span", { class: "tag primary", text: "PRIMARY" })
      : gone ? el("span", { class: "tag lag", text: "GONE, pending removal from the in-sync set" })
      : missing && failed ? el("span", { class: "tag lag", text: "REPLICATION FAILED (it dials again)" })
      : refused ? el("span", { class: "tag lag", text: "REFUSED: no replication format in common (it dials again)" })
      : missing ? el("span", { class: "tag lag", text: "NOT CONNECTED (down, or cut off)" })
      : el("span", { class: lagging ? "tag lag" : "tag", text: lagging ? `backup, LAGGING${why}` : "backup" });
    const rowClass = [isPrimary(m) && !lostPrimary ? "is-primary" : "", lagging ? "lagging" : "", missing || lostPrimary ? "down" : "", failed || refused ? "failed" : ""].join(" ").trim();
    return el("tr", { class: rowClass || null, "data-member": m.url, "data-state": m.state },
      el("td", {}, el("span", { text: m.url }), self ? el("span", { class: "note", text: ` (this broker, ${s.status.node})` }) : null,
        el("div", { class: "args", text: m.id })),
      el("td", {}, el("span", { class: `pill ${missing || lostPrimary ? "down" : m.state}`, text: gone ? "gone" : lostPrimary ? `${m.state} when last heard` : m.state })),
      el("td", {}, role),
      // an agent whose broker does not answer records epoch 0: no epoch to show
      el("td", { class: "num", text: self ? fmt(ha.epoch) : agentRecord ? (agentRecord.state === "down" ? "-" : fmt(agentRecord.epoch)) : isPrimary(m) || backup ? fmt(ha.epoch) : "-" }),
      el("td", { class: "in-sync" }, inSync),
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
  } else if (ha.link_error) {
    const l = ha.link_error;
    facts.push(`link to ${hostPort(l.address)}: ${l.reason} (${l.count} failed ${l.count === 1 ? "dial" : "dials"} since ${l.since})`);
  }
  const alerts = [];
  if (!primary && ha.replication_error) {
    const e = ha.replication_error;
    alerts.push(el("div", { class: "alert", id: "replication-error", text: `Replication failed: ${e.reason} (${e.count === 1 ? "once" : e.count + " times"} since ${e.since}). This backup is not in sync until a link catches up again.` }));
  }
  if (primary) {
    for (const r of ha.refused_links || []) {
      alerts.push(el("div", { class: "alert refused-link", text: `Backup ${hostPort(r.url)} refused: ${r.reason} (${r.count === 1 ? "once" : r.count + " dials"} since ${r.since}). Next: this primary (replication formats ${ha.replication_formats}) and that backup need a format in common: upgrade the one the reason names (docs/deploy.md, "Upgrading a cluster"); it links by itself then.` }));
    }
    for (const e of ha.replication_errors || []) {
      alerts.push(el("div", { class: "alert replication-failed", text: `Replication to ${e.url || e.backup} failed: ${e.reason} (${e.count === 1 ? "once" : e.count + " times"} since ${e.since}): not in the in-sync set until it catches up.` }));
    }
  }
  const next = nextStep(s);
  if (next) alerts.push(el("div", { class: "alert next-step", id: "next-step", text: next }));
  card.replaceChildren(
    el("div", { class: "big", id: "primary-name", text: primary ? `Primary: this broker, ${s.status.node} (${ha.url}), ${ha.state}` : ha.primary ? `The primary is at ${ha.primary}` : electingNodes(s) ? `Electing: no primary yet (${electingNodes(s)} contending)` : "No primary reachable from this backup" }),
    el("div", { class: "facts", text: facts.join(" · ") }),
    primary ? inSyncSummary(s)
      : el("div", { class: "facts in-sync-line", id: "in-sync-summary", text: ha.primary ? `In-sync set and lag: on the primary's console (${ha.primary})` : "In-sync set and lag: on the primary's console (none reachable now)" }),
    ...alerts);
  replaceRows($("members").tBodies[0], memberRows(s));
  renderAgents(s);
  $("cluster-note").textContent = primary || ha.primary
    ? "Members as this broker knows them (the primary knows every backup, a backup what the primary last told it), and every address of ha-brokers-url."
    : "Members as the primary last told this backup, before its link went down: they may have changed since (another member's console, or qpid-ha status, shows them now).";
  renderClusterActions(s);
}

// What an operator does next, in the words of the agents or of the broker's own rules
// (null when nothing is wrong): a backup with no primary; a primary waiting in recovering.
function nextStep(s) {
  const ha = s.ha;
  if (ha.state === "recovering") {
    const awaited = (ha.in_sync && ha.in_sync.awaited) || [];
    const names = awaited.map((id) => memberName(s, id)).join(", ");
    return `Recovering: promoted, this primary waits for ${names ? "its expected backups (" + names + ")" : "its expected backups"} to be ready, or for ha-backup-timeout; until then it holds publisher confirms. Next: nothing, unless a backup never comes back (start it, or its agent commits the in-sync set without it).`;
  }
  if (ha.state === "active" || ha.primary) return null;
  const electing = (s.agents && s.agents.electing) || [];
  if (electing.length) {  // the agents' records: an election under way, in their words
    const who = electing.map((a) => `${a.node}'s agent ${a.election === "leading" ? "won and promotes its broker" : "contends"} (${a.reason || "no reason given"})`).join(" · ");
    return `Electing: no primary yet; ${who}. Next: nothing: the winner's agent promotes its broker; if none is promoted within seconds, qpid-ha --zk HOSTS --cluster NAME status --all says why.`;
  }
  const alerts = (s.agents && s.agents.alerts) || [];
  if (alerts.length) return `No primary. The agents say: ${alerts.join(" · ")}`;
  if (ha.managed_by) return `No primary. Next: the agent of node ${ha.managed_by} promotes a ready backup by itself once the old primary's ZooKeeper session ends; if none is promoted, qpid-ha --zk HOSTS --cluster NAME status --all says why.`;
  if (ha.state === "ready") return "No primary. Next: no agent manages this broker: once the old primary is surely stopped, a cluster manager promotes the most advanced ready backup (Promote this broker, or qpid-ha --cluster-manager promote).";
  return `No primary. This broker is ${ha.state}, not fit to be promoted: promote a ready backup, or start the old primary again.`;
}

// The nodes whose agents contend while there is no primary ("" for none).
function electingNodes(s) {
  return ((s.agents && !s.agents.primary && s.agents.electing) || []).map((a) => a.node).join(", ");
}

// Why Promote is not offered here (null: it is): only where it can work.
function promoteWithheld(ha) {
  if (ha.state !== "ready") return null; // a primary, or a backup not caught up: no button, nothing to say
  if (ha.managed_by) return `Promotion: the agent of node ${ha.managed_by} promotes by itself (a promotion by hand is refused; qpid-ha promote --force only when no agent runs any more).`;
  if (ha.primary) return `Promotion: not while the primary at ${ha.primary} serves (two primaries would confirm apart).`;
  return null;
}

function renderClusterActions(s) {
  const box = $("cluster-actions");
  if (!canSteer() || !s.ha) { box.replaceChildren(); return; }
  const key = `${s.ha.state}/${s.ha.broker_id}/${s.ha.managed_by}/${s.ha.primary}`;
  if (box.dataset.state === key) return;
  box.dataset.state = key;
  const node = s.status.node;
  const buttons = [];
  const withheld = promoteWithheld(s.ha);
  if (withheld) buttons.push(el("p", { class: "note", id: "promote-note", text: withheld }));
  else if (s.ha.state === "ready") {
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
  // one time scale for every fail-over's bars: which took longer shows
  const totalOf = (f) => (f.until_won_ms !== null && f.phases_ms.promotion !== null
    ? (f.until_won_ms || 0) + (f.phases_ms.promotion || 0) : (f.until_promoted_ms || 0)) + (f.phases_ms.recovering || 0);
  const scale = Math.max(0, ...failovers.map((f) => Math.max(totalOf(f), f.client_outage_ms || 0)));
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

