// kubesvc's status page: polls ui/summary.json every 2 s and redraws. Plain JavaScript,
// no framework, no build step. Everything that comes from clusters or agents is set with
// textContent (never innerHTML). After each redraw the body's data-rendered counter grows and
// a "kubesvc:rendered" event fires (the browser tests wait on it).
"use strict";
(function () {
  const POLL_MS = 2000;
  const PAGE_SIZE = 50;
  const CRITICAL_STATES = new Set(["ORPHANED", "FAILED", "DELETE_FAILED"]);
  const NOT_DELIVERED = new Set(["timeout", "no_agent", "agent_disconnected", "replica_stopped"]);

  const view = { sort: null, desc: false, page: 0, filter: "", onlyProblems: false };
  const expanded = new Set();
  let summary = null;
  let lastOk = 0;
  let rendered = 0;

  const $ = (id) => document.getElementById(id);

  function el(tag, attrs, children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined) continue;
      if (key === "text") node.textContent = String(value);
      else if (key === "class") node.className = value;
      else node.setAttribute(key, String(value));
    }
    for (const child of children || []) node.append(child);
    return node;
  }

  function svg(tag, attrs) {
    const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
    return node;
  }

  function age(ms) {
    if (ms === null || ms === undefined || ms <= 0) return "—";
    const s = Math.max(0, Math.round((summary.generatedAt - ms) / 1000));
    if (s < 60) return s + " s";
    if (s < 3600) return Math.floor(s / 60) + " min";
    if (s < 86400) return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
    return Math.floor(s / 86400) + " d";
  }

  function ago(ms) {
    const text = age(ms);
    return text === "—" ? text : text + " ago";
  }

  function clock(ms) {
    return ms ? new Date(ms).toLocaleString() : "—";
  }

  function number(n) {
    return Number(n || 0).toLocaleString("en-US");
  }

  function bytes(n) {
    const units = ["B", "KiB", "MiB", "GiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : Math.round(n)) + " " + units[i];
  }

  // -- header and problems ---------------------------------------------------------------

  function renderHeader() {
    $("server").textContent = "server " + summary.serverId;
    const t = summary.totals;
    const pills = [["accounts", t.accounts, ""]];
    for (const [state, count] of Object.entries(t.byState)) {
      const tone = state === "ACTIVE" ? "" : CRITICAL_STATES.has(state) ? "bad" : "warn";
      pills.push([state, count, tone]);
    }
    pills.push(["agents", t.agents, t.agents || !t.accounts ? "" : "bad"]);
    pills.push(["objects", number(t.objects), ""]);
    pills.push(["forbidden kinds", t.forbiddenKinds, t.forbiddenKinds ? "bad" : ""]);
    pills.push(["failed ops", t.failedOperations, t.failedOperations ? "warn" : ""]);
    pills.push(["events/min", number(t.eventsLastMinute), ""]);
    $("totals").replaceChildren(
      ...pills.map(([label, value, tone]) =>
        el("span", { class: "pill " + tone, "data-total": label }, [
          el("b", { text: value }), " " + label,
        ]))
    );
  }

  function renderProblems() {
    const items = summary.problems.map((p) =>
      el("li", { class: p.severity, "data-what": p.what }, [
        el("span", { class: "what", text: p.what }),
        el("span", { class: "subject", text: p.subject }),
        el("span", { text: p.message }),
      ]));
    if (summary.truncated.problems) {
      items.push(el("li", { text: summary.truncated.problems + " more not shown" }));
    }
    if (!items.length) {
      items.push(el("li", {
        class: "ok",
        text: "Nothing: every account is ACTIVE, every kind is watched, no operation failed.",
      }));
    }
    $("problems").replaceChildren(...items);
  }

  // -- charts -----------------------------------------------------------------------------

  function chart(target, values, perSecond, format) {
    const w = 600, h = 90, top = 12, bottom = 14;
    const rates = values.map((v) => v / perSecond);
    const max = Math.max(1, ...rates);
    const step = rates.length > 1 ? w / (rates.length - 1) : w;
    const y = (v) => top + (h - top - bottom) * (1 - v / max);
    const points = rates.map((v, i) => (i * step).toFixed(1) + "," + y(v).toFixed(1));
    const root = svg("svg", { viewBox: `0 0 ${w} ${h}`, preserveAspectRatio: "none", role: "img" });
    const last = rates.length ? rates[rates.length - 1] : 0;
    const title = svg("title");
    title.textContent = `now ${format(last)}/s, peak ${format(max)}/s`;
    root.append(title);
    root.append(svg("line", { class: "axis", x1: 0, x2: w, y1: h - bottom, y2: h - bottom }));
    if (points.length) {
      root.append(svg("polygon", {
        class: "area", points: `0,${h - bottom} ${points.join(" ")} ${w},${h - bottom}`,
      }));
      root.append(svg("polyline", { class: "line", points: points.join(" ") }));
    }
    const label = (x, yy, text, anchor) => {
      const t = svg("text", { x, y: yy, "text-anchor": anchor });
      t.textContent = text;
      root.append(t);
    };
    label(2, 10, "peak " + format(max) + "/s", "start");
    label(2, h - 2, "−" + Math.round((values.length * summary.activity.bucketMs) / 60000) + " min", "start");
    label(w - 2, h - 2, "now", "end");
    $(target).replaceChildren(root);
    return last;
  }

  function renderCharts() {
    const a = summary.activity;
    const seconds = a.bucketMs / 1000;
    const events = chart("chart-events", a.events, seconds, (v) => number(Math.round(v)));
    const sent = chart("chart-bytes", a.bytes, seconds, bytes);
    $("events-now").textContent = "(now " + number(Math.round(events)) + "/s)";
    $("bytes-now").textContent = "(now " + bytes(sent) + "/s)";
    $("budget-note").textContent = summary.budget.note;
  }

  // -- accounts ---------------------------------------------------------------------------

  const SORT_KEYS = {
    name: (a) => a.name,
    state: (a) => a.state,
    role: (a) => a.role,
    agent: (a) => a.agent,
    cluster: (a) => a.kubeHost,
    objects: (a) => a.objects,
    kinds: (a) => a.kindsSynced,
    forbidden: (a) => a.unavailable.length,
    newest: (a) => -(a.newestEvent || 0),
    rate: (a) => a.eventsLastMinute,
  };

  function troubled(a) {
    return a.state !== "ACTIVE" || a.unavailable.length > 0;
  }

  function haystack(a) {
    const kinds = a.unavailable.map((u) => u.kind).join(" ");
    return [a.name, a.state, a.role, a.agent, a.kubeHost, a.kubeVersion, a.error, kinds]
      .join(" ").toLowerCase();
  }

  function visibleAccounts() {
    const words = view.filter.toLowerCase().split(/\s+/).filter(Boolean);
    let rows = summary.accounts.filter((a) =>
      (!view.onlyProblems || troubled(a)) && words.every((w) => haystack(a).includes(w)));
    if (view.sort) {
      const key = SORT_KEYS[view.sort];
      rows = rows.slice().sort((x, y) => {
        const a = key(x), b = key(y);
        const order = a < b ? -1 : a > b ? 1 : x.name < y.name ? -1 : 1;
        return view.desc ? -order : order;
      });
    }
    return rows;
  }

  function stateBadge(state) {
    const tone = state === "ACTIVE" || CRITICAL_STATES.has(state) ? state : "other";
    return el("span", { class: "state " + tone, text: state });
  }

  function accountRow(a) {
    const fingerprint = a.certFingerprint ? a.certFingerprint.slice(0, 12) + "…" : "";
    const cluster = el("td", { "data-col": "cluster", title: a.certFingerprint || null }, [
      el("span", { class: "mono", text: a.kubeHost || "—" }),
      el("span", { class: "muted", text: " " + (a.kubeVersion || "") + " " + fingerprint }),
    ]);
    const rowAttrs = { class: "account", "data-account": a.name, "aria-expanded": expanded.has(a.name) };
    const newestTitle = "newest watch progress (events or bookmarks): " + ago(a.watchProgress);
    return el("tr", rowAttrs, [
      el("td", { "data-col": "name", class: "mono", text: a.name }),
      el("td", { "data-col": "state", title: a.error || null }, [stateBadge(a.state)]),
      el("td", { "data-col": "role", text: a.role || "—" }),
      el("td", { "data-col": "agent", class: "mono",
                 text: (a.agent || "—") + (a.standbys ? ` (+${a.standbys} standby)` : "") }),
      cluster,
      el("td", { "data-col": "objects", class: "num", text: number(a.objects) }),
      el("td", { "data-col": "kinds", class: "num", text: a.kindsSynced + " / " + a.kinds.length }),
      el("td", { "data-col": "forbidden", class: "num" + (a.forbidden ? " bad" : ""),
                 text: a.unavailable.length }),
      el("td", { "data-col": "newest", class: "num", title: newestTitle, text: ago(a.newestEvent) }),
      el("td", { "data-col": "rate", class: "num", text: number(a.eventsLastMinute) }),
    ]);
  }

  function detailRow(a) {
    const kinds = el("div", { class: "kinds" }, a.kinds.map(([kind, group, objects, synced]) => {
      const label = group ? `${kind}.${group}` : kind;
      return el("div", { "data-kind": kind, "data-group": group, class: synced ? "" : "unsynced",
                         title: synced ? label : label + ": no listing finished yet" }, [
        el("span", { text: label }),
        el("span", { class: "count", text: number(objects) }),
      ]);
    }));
    const parts = [kinds];
    if (!a.kinds.length) parts.push(el("span", { class: "muted", text: "no objects cached" }));
    if (a.unavailable.length) {
      parts.push(el("ul", { class: "unavailable" }, a.unavailable.map((u) =>
        el("li", { "data-unavailable": u.kind, text:
          `${u.kind}${u.group ? "." + u.group : ""}${u.scope ? " in " + u.scope : ""}: ` +
          `${u.code || "gone"} ${u.reason} (since ${ago(u.since)})` }))));
    }
    if (a.error) parts.push(el("p", { class: "note", text: "error: " + a.error }));
    return el("tr", { class: "detail", "data-detail": a.name }, [
      el("td", { colspan: 10 }, parts),
    ]);
  }

  function renderAccounts() {
    const rows = visibleAccounts();
    const pages = Math.max(1, Math.ceil(rows.length / PAGE_SIZE));
    view.page = Math.min(view.page, pages - 1);
    const start = view.page * PAGE_SIZE;
    const shown = rows.slice(start, start + PAGE_SIZE);
    const body = [];
    for (const a of shown) {
      body.push(accountRow(a));
      if (expanded.has(a.name)) body.push(detailRow(a));
    }
    if (!shown.length) {
      const text = summary.accounts.length ? "no account matches" : "no accounts yet";
      body.push(el("tr", {}, [el("td", { colspan: 10, class: "empty", text })]));
    }
    document.querySelector("#accounts tbody").replaceChildren(...body);
    const cut = summary.truncated.accounts ? ` (${summary.truncated.accounts} not sent)` : "";
    $("accounts-count").textContent =
      `${rows.length} of ${summary.totals.accounts}${cut}`;
    $("page-info").textContent = rows.length
      ? `${start + 1}–${start + shown.length} of ${rows.length}` : "0";
    $("prev").disabled = view.page === 0;
    $("next").disabled = view.page >= pages - 1;
    for (const th of document.querySelectorAll("#accounts th[data-sort]")) {
      const on = th.dataset.sort === view.sort;
      if (on) th.setAttribute("aria-sort", view.desc ? "descending" : "ascending");
      else th.removeAttribute("aria-sort");
    }
  }

  // -- agents and operations --------------------------------------------------------------

  function renderAgents() {
    const rows = summary.agents.map((g) => el("tr", { "data-agent": g.agentId }, [
      el("td", { class: "mono", text: g.agentId }),
      el("td", { text: g.version || "—" }),
      el("td", { class: "mono", text: g.replica }),
      el("td", { class: "mono", text: g.peer }),
      el("td", { class: "num", text: g.accounts }),
      el("td", { text: clock(g.connectedAt) + " (" + age(g.connectedAt) + ")" }),
      el("td", { class: "num", text: g.lastHeartbeat === null
        ? "(seen by " + g.replica + ")" : ago(g.lastHeartbeat || g.connectedAt) }),
    ]));
    if (!rows.length) {
      rows.push(el("tr", {}, [el("td", { colspan: 7, class: "empty", text: "no agent connected" })]));
    }
    document.querySelector("#agents tbody").replaceChildren(...rows);
    $("agents-count").textContent = `${summary.totals.agents} agents, ${summary.totals.sessions} sessions`;
  }

  function renderOperations() {
    const rows = summary.operations.map((o) => {
      const tone = o.outcome === "succeeded" || o.outcome === "running" ? o.outcome
        : NOT_DELIVERED.has(o.outcome) ? "bad" : "failed";
      return el("tr", { "data-operation": o.id }, [
        el("td", { title: clock(o.created), text: ago(o.created) }),
        el("td", { class: "mono", text: o.account }),
        el("td", { text: o.type }),
        el("td", {}, [el("span", { class: "outcome " + tone, text: o.outcome })]),
        el("td", { text: o.error || "" }),
      ]);
    });
    if (!rows.length) {
      rows.push(el("tr", {}, [el("td", { colspan: 5, class: "empty", text: "no operations yet" })]));
    }
    document.querySelector("#operations tbody").replaceChildren(...rows);
  }

  // -- the loop ---------------------------------------------------------------------------

  function render() {
    if (!summary) return;
    renderHeader();
    renderProblems();
    renderCharts();
    renderAccounts();
    renderAgents();
    renderOperations();
    rendered += 1;
    document.body.dataset.rendered = String(rendered);
    document.dispatchEvent(new CustomEvent("kubesvc:rendered", { detail: rendered }));
  }

  function showFreshness() {
    const node = $("freshness");
    if (!lastOk) return;
    const s = Math.round((Date.now() - lastOk) / 1000);
    const stale = s > (3 * POLL_MS) / 1000;
    node.className = "freshness " + (stale ? "stale" : "live");
    node.textContent = stale
      ? `no answer from the server for ${s} s: showing what it said at ${new Date(lastOk).toLocaleTimeString()}`
      : "live";
  }

  let timer = null;
  let inFlight = false;

  function schedule(delay) {
    if (timer === null && !inFlight && !document.hidden) {
      timer = setTimeout(() => { timer = null; poll(); }, delay);
    }
  }

  async function poll() {
    inFlight = true;
    try {
      const response = await fetch("ui/summary.json", {
        credentials: "same-origin", cache: "no-store", headers: { Accept: "application/json" },
      });
      if (!response.ok) throw new Error("HTTP " + response.status);
      summary = await response.json();
      lastOk = Date.now();
      render();
    } catch (err) {
      // Keep the last picture; the header says how old it is.
    } finally {
      inFlight = false;
      showFreshness();
      schedule(POLL_MS);
    }
  }

  function wire() {
    $("filter").addEventListener("input", (e) => {
      view.filter = e.target.value;
      view.page = 0;
      render();
    });
    $("only-problems").addEventListener("change", (e) => {
      view.onlyProblems = e.target.checked;
      view.page = 0;
      render();
    });
    $("prev").addEventListener("click", () => { view.page = Math.max(0, view.page - 1); render(); });
    $("next").addEventListener("click", () => { view.page += 1; render(); });
    for (const th of document.querySelectorAll("#accounts th[data-sort]")) {
      th.addEventListener("click", () => {
        const key = th.dataset.sort;
        if (view.sort === key && view.desc) { view.sort = null; view.desc = false; }
        else if (view.sort === key) view.desc = true;
        else { view.sort = key; view.desc = false; }
        view.page = 0;
        render();
      });
    }
    document.querySelector("#accounts tbody").addEventListener("click", (e) => {
      const row = e.target.closest("tr.account");
      if (!row) return;
      const name = row.dataset.account;
      if (expanded.has(name)) expanded.delete(name); else expanded.add(name);
      render();
    });
    // A hidden tab stops polling; shown again, it asks at once.
    document.addEventListener("visibilitychange", () => {
      if (document.hidden || inFlight) return;
      if (timer !== null) { clearTimeout(timer); timer = null; }
      poll();
    });
    setInterval(showFreshness, 1000);
    poll();
  }

  wire();
})();
