// The console's admin page ("Users & vhosts", as RabbitMQ's Admin tab): users, their
// permissions, virtual hosts and their limits, and the definitions' export and import. Users and
// permissions made here are the cluster's (replicated to every backup; docs/console.md);
// a broker's own users (its users file) are listed, and changed with qpid-ha users.
"use strict";

(function () {
  const app = window.consoleApp;
  const { el, api, fmt, confirmThen, runAction, replaceRows, canAdmin, changesRefused, $ } = app;
  const enc = encodeURIComponent;
  let loadedAt = 0;
  let formsFor = null;
  let definitionsFor = null;  // the definitions box needs no vhost list: built per role only
  let users = [];
  let permissions = [];

  const vhostNames = (s) => (s.vhosts || []).map((v) => v.name).sort((a, b) => (a === "/" ? -1 : b === "/" ? 1 : a.localeCompare(b)));

  // A change, then the lists read again at once.
  function change(action) {
    return runAction(async () => { const said = await action(); loadedAt = 0; app.render(); return said; });
  }

  function userRow(u, editable) {
    const where = permissions.filter((p) => p.user === u.name).map((p) => p.vhost);
    const source = u.source === "own" ? "this broker's users file" : u.password === false ? "cluster (no password)" : "cluster";
    const remove = editable && u.source === "cluster"
      ? el("button", { class: "danger delete-user", onclick: () => confirmThen(`Delete user ${u.name} and its permissions on every broker of the cluster?`,
        async () => { await api("DELETE", `/api/users/${enc(u.name)}`); loadedAt = 0; app.render(); return `deleted user ${u.name}`; }) }, "Delete")
      : null;
    return el("tr", { "data-user": u.name },
      el("td", { text: u.name }), el("td", { text: (u.tags || []).join(", ") || "-" }),
      el("td", { text: u.roles.join(", ") || "none (AMQP only)" }), el("td", { text: source }),
      el("td", { text: u.source === "own" ? "all" : where.join(", ") || "none" }), el("td", {}, remove));
  }

  function permissionRow(p, editable) {
    const clear = editable
      ? el("button", { class: "danger clear-permission", onclick: () => confirmThen(`Clear the permission of ${p.user} in vhost ${p.vhost}?`,
        async () => { await api("DELETE", `/api/permissions/${enc(p.vhost)}/${enc(p.user)}`); loadedAt = 0; app.render(); return `cleared ${p.user} in ${p.vhost}`; }) }, "Clear")
      : null;
    return el("tr", { "data-permission": `${p.vhost}/${p.user}` }, el("td", { text: p.user }), el("td", { text: p.vhost }),
      el("td", { text: p.configure }), el("td", { text: p.write }), el("td", { text: p.read }), el("td", {}, clear));
  }

  // "Add a user" (RabbitMQ's words): a password (hashed by the broker) and tags.
  function addUserForm() {
    const name = el("input", { id: "new-user-name", placeholder: "name", required: true });
    const password = el("input", { id: "new-user-password", type: "password", placeholder: "password", required: true, autocomplete: "new-password" });
    const tags = el("input", { id: "new-user-tags", placeholder: "tags: administrator, monitoring", size: 28 });
    return el("details", { class: "add-form" }, el("summary", { text: "Add a user" }),
      el("form", { class: "inline", onsubmit: (event) => { event.preventDefault(); change(async () => {
        const made = await api("PUT", `/api/users/${enc(name.value)}`, { password: password.value, tags: tags.value });
        password.value = "";
        return `user ${made.name} saved (${made.roles.join(", ") || "AMQP only"}): give it a permission in a vhost`;
      }); } }, el("label", {}, "Name ", name), el("label", {}, "Password ", password), el("label", {}, "Tags ", tags),
        el("button", { type: "submit", id: "add-user-button" }, "Add user")));
  }

  function setPermissionForm(vhosts) {
    const user = el("input", { id: "permission-user", placeholder: "user", required: true });
    const vhost = el("select", { id: "permission-vhost" }, ...vhosts.map((v) => el("option", { value: v, text: v })));
    const field = (id, label) => { const input = el("input", { id, size: 8 }); input.value = ".*"; return [input, el("label", {}, `${label} `, input)]; };
    const [configure, configureLabel] = field("permission-configure", "Configure");
    const [write, writeLabel] = field("permission-write", "Write");
    const [read, readLabel] = field("permission-read", "Read");
    return el("details", { class: "add-form" }, el("summary", { text: "Set permission" }),
      el("form", { class: "inline", onsubmit: (event) => { event.preventDefault(); change(async () => {
        await api("PUT", `/api/permissions/${enc(vhost.value)}/${enc(user.value)}`, { configure: configure.value, write: write.value, read: read.value });
        return `${user.value} may open vhost ${vhost.value}`;
      }); } }, el("label", {}, "User ", user), el("label", {}, "Vhost ", vhost), configureLabel, writeLabel, readLabel,
        el("button", { type: "submit", id: "set-permission-button" }, "Set permission")));
  }

  function addVhostForm() {
    const name = el("input", { id: "new-vhost-name", placeholder: "name", required: true });
    return el("details", { class: "add-form" }, el("summary", { text: "Add a new virtual host" }),
      el("form", { class: "inline", onsubmit: (event) => { event.preventDefault(); change(async () => {
        await api("PUT", `/api/vhosts/${enc(name.value)}`, {});
        return `vhost ${name.value} added`;
      }); } }, el("label", {}, "Name ", name), el("button", { type: "submit", id: "add-vhost-button" }, "Add virtual host")));
  }

  // RabbitMQ's "Set / update a virtual host limit": max-connections or max-queues (a
  // negative value: no limit). Enforced by the primary, kept with the cluster's users.
  function vhostLimitForm(vhosts) {
    const vhost = el("select", { id: "limit-vhost" }, ...vhosts.map((v) => el("option", { value: v, text: v })));
    const name = el("select", { id: "limit-name" }, ...["max-connections", "max-queues"].map((n) => el("option", { value: n, text: n })));
    const value = el("input", { id: "limit-value", type: "number", step: 1, size: 8, required: true });
    return el("details", { class: "add-form" }, el("summary", { text: "Set / update a virtual host limit" }),
      el("form", { class: "inline", onsubmit: (event) => { event.preventDefault(); change(async () => {
        await api("PUT", `/api/vhost-limits/${enc(vhost.value)}/${enc(name.value)}`, { value: Number(value.value) });
        return `${name.value} of vhost ${vhost.value} set to ${value.value}`;
      }); } }, el("label", {}, "Vhost ", vhost), el("label", {}, "Limit ", name), el("label", {}, "Value ", value),
        el("button", { type: "submit", id: "set-limit-button" }, "Set limit")));
  }

  // A vhost's limits, each with a Clear button where changes are made.
  function limitsCell(v, editable) {
    const named = Object.entries(v.limits || {});
    if (!named.length) return el("td", { class: "limits", text: "-" });
    return el("td", { class: "limits" }, ...named.map(([n, value]) => el("span", { class: "limit", "data-limit": n },
      `${n}: ${value < 0 ? "no limit" : fmt(value)} `,
      editable ? el("button", { class: "danger clear-limit", onclick: () => confirmThen(`Clear ${n} of vhost ${v.name}?`,
        async () => { await api("DELETE", `/api/vhost-limits/${enc(v.name)}/${enc(n)}`); return `cleared ${n} of vhost ${v.name}`; }) }, "Clear") : null)));
  }

  // Export: a download of GET /api/definitions. Import: a file read here, sent as JSON;
  // the answer's counts and what was ignored or skipped are shown as they came.
  function definitionsBox(editable) {
    const file = el("input", { id: "definitions-file", type: "file", accept: ".json,application/json" });
    const result = el("div", { id: "definitions-result" });
    const upload = el("form", { class: "inline", onsubmit: (event) => { event.preventDefault(); change(async () => {
      if (!file.files.length) throw new Error("choose a definitions file first");
      let data;
      try { data = JSON.parse(await file.files[0].text()); } catch (e) { throw new Error(`the file is not JSON: ${e.message}`); }
      const answer = await api("POST", "/api/definitions", data);
      const counts = Object.entries(answer.imported).map(([k, v]) => `${v} ${k}`).join(", ");
      result.replaceChildren(el("p", { text: `Imported: ${counts}.` }),
        ...[["ignored", "Not imported (no such feature here)"], ["skipped", "Skipped"]].filter(([k]) => answer[k].length)
          .map(([k, title]) => el("div", { class: `definitions-${k}` }, el("strong", { text: `${title}:` }), el("ul", {}, ...answer[k].map((line) => el("li", { text: line }))))));
      return `definitions imported: ${counts}`;
    }); } }, el("label", {}, "Import definitions ", file), el("button", { type: "submit", id: "import-definitions-button" }, "Upload broker definitions"));
    return el("div", {},
      el("p", {}, el("a", { id: "export-definitions", href: "/api/definitions?download=qpidd-definitions.json", download: "qpidd-definitions.json" }, "Download broker definitions"),
        " (RabbitMQ's JSON, which RabbitMQ 3.10.8 imports: the cluster's users with their hashes, vhosts and their limits, permissions, queues, exchanges, bindings;"
          + " users with scrypt hashes, made here, are in its qpidd_only section, which RabbitMQ passes over and qpidd imports)"),
      editable ? upload : el("p", { class: "note", text: changesRefused() || "" }), result);
  }

  function renderAdmin(s) {
    replaceRows($("vhosts").tBodies[0], (s.vhosts || []).map((v) => el("tr", { "data-vhost": v.name },
      el("td", { text: v.name }), el("td", { class: "num", text: fmt(v.queues) }), el("td", { class: "num", text: fmt(v.exchanges) }),
      limitsCell(v, canAdmin() && !changesRefused()),
      el("td", {}, canAdmin() && !changesRefused() && v.name !== "/"
        ? el("button", { class: "danger delete-vhost", onclick: () => confirmThen(`Delete vhost ${v.name} with its queues, their messages, exchanges and bindings?`,
          async () => { await api("DELETE", `/api/vhosts/${enc(v.name)}`); loadedAt = 0; return `deleted vhost ${v.name}`; }) }, "Delete") : null))));
    const box = $("users");
    if (!s.me.auth) { box.replaceChildren(el("p", { class: "note", text: "Authentication is off: no users are checked." })); return; }
    if (!canAdmin()) {
      box.replaceChildren(el("p", { class: "note", id: "users-none", text: "Only administrators see the users." }));
      $("admin-forms").replaceChildren();
      $("vhost-limit-form").replaceChildren();
      $("definitions").replaceChildren();
      formsFor = definitionsFor = null;  // built again if an administrator logs in here
      return;
    }
    const editable = !changesRefused();
    const key = `${editable}/${vhostNames(s).join("/")}`;
    if (formsFor !== key) {  // built once per role and vhosts: what is typed stays
      formsFor = key;
      $("admin-forms").replaceChildren(...(editable ? [addUserForm(), setPermissionForm(vhostNames(s)), addVhostForm()]
        : [el("p", { class: "note", text: changesRefused() })]));
      $("vhost-limit-form").replaceChildren(...(editable ? [vhostLimitForm(vhostNames(s))] : []));
    }
    if (definitionsFor !== editable) {  // an import's answer stays when it made vhosts
      definitionsFor = editable;
      $("definitions").replaceChildren(definitionsBox(editable));
    }
    if (Date.now() - loadedAt < 10000) return;
    loadedAt = Date.now();
    Promise.all([api("GET", "/api/users"), api("GET", "/api/permissions")]).then(([u, p]) => {
      users = u;
      permissions = p;
      box.replaceChildren(el("table", { class: "grid", id: "users-table" },
        el("thead", {}, el("tr", {}, ...["User", "Tags", "Management roles", "Defined by", "Vhosts", ""].map((t) => el("th", { text: t })))),
        el("tbody", {}, ...users.map((x) => userRow(x, editable)))),
      el("h3", { text: "Permissions" }),
      permissions.length
        ? el("table", { class: "grid", id: "permissions-table" },
          el("thead", {}, el("tr", {}, ...["User", "Vhost", "Configure", "Write", "Read", ""].map((t) => el("th", { text: t })))),
          el("tbody", {}, ...permissions.map((x) => permissionRow(x, editable))))
        : el("p", { class: "note", text: "No cluster user has a permission yet: a cluster user opens only the vhosts it has one in." }));
    }, (error) => box.replaceChildren(el("p", { class: "note", text: error.message })));
  }

  app.state.renderers.users = renderAdmin;
})();
