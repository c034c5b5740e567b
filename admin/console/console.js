"use strict";
// The exgate operator console: polls the admin API and renders it. Data
// is only ever written with textContent, never as HTML.
(function () {
  const refreshMs = 2000;
  const history = []; // {req, ref} per refresh
  let last = null, top = null;

  function token() { return sessionStorage.getItem("exgate-admin-token") || ""; }
  async function api(path, opts) {
    opts = opts || {};
    const h = {};
    if (token()) h["Authorization"] = "Bearer " + token();
    const r = await fetch(path, Object.assign({headers: h, cache: "no-store"}, opts));
    const body = await r.json().catch(() => ({detail: r.status + " " + r.statusText}));
    if (r.status === 401) { document.getElementById("login").hidden = false; throw new Error("unauthorized"); }
    // The listener refuses the console (no admin token set, a Host it does
    // not answer to): say why instead of drawing nothing.
    if (r.status === 403 && body.code !== "reset_disabled") throw new Error(body.detail);
    return body;
  }
  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }
  function row(tbody, cells) {
    const tr = document.createElement("tr");
    for (const c of cells) tr.appendChild(c instanceof Node ? wrap(c) : el("td", c));
    tbody.appendChild(tr);
  }
  function wrap(n) { const td = document.createElement("td"); td.appendChild(n); return td; }
  function secs(s) { return s < 0 ? "never" : s === 0 ? "now" : s.toFixed(1) + " s"; }

  function renderStatus(s) {
    document.getElementById("replica").textContent = "replica " + s.replica +
      (s.host && s.host !== s.replica ? " on " + s.host : "") + " · " + s.version;
    const ready = document.getElementById("ready");
    ready.textContent = s.draining ? "draining" : s.ready ? "ready" : "not ready";
    ready.className = "badge " + (s.ready ? "ok" : "bad");
    const dl = document.getElementById("status");
    dl.replaceChildren();
    const add = (k, v, cls) => { dl.appendChild(el("dt", k)); dl.appendChild(el("dd", v, cls)); };
    add("store", s.store.mode + (s.store.reachable ? " · reachable" : " · UNREACHABLE"), s.store.reachable ? "" : "zero");
    if (s.store.error) add("store error", s.store.error, "zero");
    add("store failures", "failed round trips " + s.store.store_errors + " · decided without it: open " + s.store.fallback_open +
        " · closed " + s.store.fallback_closed + " · local " + s.store.fallback_local);
    const d = s.duplicates;
    if (d) {
      const mib = (b) => (b / 1048576).toFixed(1) + " MiB";
      add("duplicate protection", d.mode + " · " + mib(d.bytes) + (d.max_bytes ? " of " + mib(d.max_bytes) : "") +
          (d.full ? " · FULL: new identifiers refused" : "") + (d.replica_acks ? " · " + d.replica_acks + " replica ack(s)" : ""), d.full ? "zero" : "");
      add("account share", d.share_identifiers + " identifiers · " + mib(d.share_bytes) +
          (d.max_bytes ? " · the store holds " + Math.floor(d.max_bytes / d.share_bytes) + " full shares" : ""));
      if (d.error) add("duplicate protection error", d.error, "zero");
    }
    add("configuration", (s.config_file || "built-in defaults") + (s.config_hash ? " · " + s.config_hash.slice(0, 12) : ""));
    add("last reload", s.last_reload ? new Date(s.last_reload).toLocaleString() + " · " + s.reload_outcome : "none");
    add("started", new Date(s.started).toLocaleString());
    if (s.catalogue_age !== undefined) add("catalogue age", s.catalogue_age < 0 ? "not loaded" : secs(s.catalogue_age));
    for (const u of s.upstream || []) {
      const by = {};
      for (const i of u.instances || []) by[i.state] = (by[i.state] || 0) + 1;
      add("service " + u.service, (u.available ? "available" : "UNAVAILABLE: its routes answer 503") + (u.panic ? " · PANIC: ejected instances sent requests too" : "") +
          (u.failover ? " · FAILOVER: requests go to backup instances (a higher SRV priority)" : "") +
          " · " + Object.entries(by).map(([k, n]) => n + " " + k).join(", "), u.available && !u.panic && !u.failover ? "" : "zero");
      for (const i of u.instances || []) if (i.state !== "healthy")
        add("  " + i.addr, i.state + (i.reason ? " (" + i.reason + ")" : "") + (i.ejected_until ? " until " + new Date(i.ejected_until).toLocaleTimeString() : ""), "zero");
    }
    for (const [k, v] of Object.entries(s.listeners || {})) add(k + " listener", v);
    for (const [k, v] of Object.entries(s.checks || {})) add("check " + k, v, v === "ok" ? "" : "zero");
    add("resets", s.resets + (s.reset_enabled ? "" : " (reset needs the admin token, " + s.admin_token_env + ")"));
    const tb = document.querySelector("#routes tbody");
    tb.replaceChildren();
    for (const r of s.routes) for (const l of r.limits) {
      const tiers = Object.entries(l.tiers || {}).map(([t, v]) => t + ": " + v).join(", ");
      row(tb, [r.route, l.name + (l.shadow ? " (shadow)" : ""), l.key + (l.when && l.when !== "always" ? " (" + l.when + " only)" : ""), l.limit, tiers, r.on_store_error]);
    }
    if (last) history.push({req: s.limited_requests - last.limited_requests, ref: s.limited_refused - last.limited_refused});
    if (history.length > 60) history.shift();
    last = s;
    drawChart();
  }

  function drawChart() {
    // One pair of bars per refresh: requests behind, refusals in front.
    const svg = document.getElementById("chart");
    svg.replaceChildren();
    const ns = "http://www.w3.org/2000/svg";
    const maxV = Math.max(1, ...history.map(h => h.req));
    const step = 600 / 60;
    history.forEach((h, i) => {
      for (const [v, color] of [[h.req, "#0969da"], [h.ref, "#cf222e"]]) {
        const height = 100 * v / maxV;
        const r = document.createElementNS(ns, "rect");
        r.setAttribute("x", (i * step).toFixed(1));
        r.setAttribute("y", (118 - height).toFixed(1));
        r.setAttribute("width", (step - 2).toFixed(1));
        r.setAttribute("height", height.toFixed(1));
        r.setAttribute("fill", color);
        svg.appendChild(r);
      }
    });
    const t = document.createElementNS(ns, "text");
    t.setAttribute("x", "4"); t.setAttribute("y", "12"); t.setAttribute("font-size", "11");
    t.textContent = "max " + maxV + " per " + refreshMs / 1000 + " s";
    svg.appendChild(t);
  }

  function inspectButton(kind, id) {
    const b = el("button", "inspect", "link");
    b.type = "button";
    b.addEventListener("click", () => {
      document.getElementById("inspect-kind").value = kind === "token" ? "token_id" : kind;
      document.getElementById("inspect-id").value = id;
      inspect();
    });
    return b;
  }

  function renderTop() {
    if (!top) return;
    const w = top.windows[Number(document.getElementById("window").value)];
    const refused = document.querySelector("#top-refused tbody");
    const requests = document.querySelector("#top-requests tbody");
    refused.replaceChildren(); requests.replaceChildren();
    const rows = (key, tb, what) => {
      const all = [];
      for (const r of w.routes) for (const e of r[key]) all.push([r, e]);
      all.sort((a, b) => b[1].count - a[1].count);
      for (const [r, e] of all.slice(0, 15)) {
        row(tb, [r.route, e.kind, el("span", e.id, "id"), e.count, e.error, inspectButton(e.kind, e.id)]);
      }
      if (all.length === 0) row(tb, ["—", "", "no " + what + " in this window", "", "", ""]);
    };
    rows("identities_by_refused", refused, "refusals");
    rows("addresses_by_refused", refused, "");
    rows("identities_by_requests", requests, "requests");
    rows("addresses_by_requests", requests, "");
    for (const tb of [refused, requests]) { // one "nothing" line is enough
      const empty = [...tb.rows].filter(r => r.cells[0].textContent === "—");
      if (empty.length && empty.length < tb.rows.length) empty.forEach(r => r.remove());
      else if (empty.length > 1) empty.slice(1).forEach(r => r.remove());
    }
    document.getElementById("top-note").textContent = "replica " + top.replica + ", the last " + Math.round(w.seconds) +
      " s (the window slides) · " + top.note + " · k = " + top.k;
  }

  // renderRefusals lists exgate's last refusals of sampled requests: the
  // trace id is what to search for in the tracing backend.
  function renderRefusals(b) {
    const tb = document.querySelector("#refusals tbody");
    tb.replaceChildren();
    for (const r of b.refusals) {
      row(tb, [new Date(r.time).toLocaleTimeString(), r.route, r.method, r.status, r.code,
        el("span", r.request_id, "id"), el("span", r.trace_id, "id")]);
    }
    if (b.refusals.length === 0) {
      row(tb, ["—", "", "", "", "", "", b.tracing ? "no sampled request refused yet" : "tracing is off (tracing.exporter)"]);
    }
  }

  async function inspect() {
    const kind = document.getElementById("inspect-kind").value;
    const id = document.getElementById("inspect-id").value.trim();
    if (!id) return;
    const body = await api("/admin/inspect?" + new URLSearchParams({[kind]: id}));
    const tb = document.querySelector("#inspect-table tbody");
    tb.replaceChildren();
    if (body.code) { document.getElementById("inspect-subject").textContent = body.detail; return; }
    document.getElementById("inspect-subject").textContent = body.subject.kind + " " + body.subject.id;
    // The limits closest to refusing first: that is what support asks about.
    const fill = l => l.burst > 0 ? l.remaining / l.burst : 1;
    body.limits.sort((a, b) => fill(a) - fill(b));
    for (const l of body.limits) {
      row(tb, [l.route, l.limit, l.key, l.tier || "", l.rate + "/" + l.period + " burst " + l.burst,
        el("span", l.remaining, l.remaining === 0 ? "zero" : ""), secs(l.retry_after), secs(l.reset_after)]);
    }
  }

  async function refresh() {
    try {
      const [s, t, rf] = await Promise.all([api("/admin/status"), api("/admin/top"), api("/admin/refusals")]);
      top = t;
      renderStatus(s);
      renderTop();
      renderRefusals(rf);
      document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
    } catch (e) {
      document.getElementById("updated").textContent = "not updated: " + e.message;
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    document.getElementById("login").addEventListener("submit", ev => {
      ev.preventDefault();
      const input = document.getElementById("token");
      sessionStorage.setItem("exgate-admin-token", input.value);
      input.value = "";
      document.getElementById("login").hidden = true;
      refresh();
    });
    document.getElementById("inspect-form").addEventListener("submit", ev => { ev.preventDefault(); inspect(); });
    document.getElementById("window").addEventListener("change", renderTop);
    refresh();
    setInterval(refresh, refreshMs);
  });
})();
