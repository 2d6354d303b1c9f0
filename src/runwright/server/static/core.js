"use strict";
// The dashboard's core: the API client, DOM helpers, the hash router, signing in.
// Plain JavaScript on purpose (no build step). The session is an HttpOnly cookie set by
// POST /session: script never holds the token, and streams carry the cookie too. A
// request that changes something sends X-Requested-With, which the server requires of
// cookie-authenticated writes (another site's form cannot add it).
const rw = {views: {}, current: null, timer: null, visit: 0, me: null};

// The operator's decode switch (shown when the server runs with --operator-decode): on,
// every read asks for tenants' encrypted payloads plain (decode=1), each read logged by
// the server; off, they show sealed: {"~sealed": {"key": ..., "bytes": ...}}.
rw.decode = false;
rw.decoding = path => rw.decode ? `${path}${path.includes("?") ? "&" : "?"}decode=1` : path;

rw.api = async (path, options = {}) => {
  if (!options.method) path = rw.decoding(path);  // reads only
  const headers = {"X-Requested-With": "runwright", ...(options.headers || {})};
  if (options.body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {credentials: "same-origin", ...options, headers});
  if (response.status === 401 && path !== "/session") rw.signedOut();  // the session ended
  if (!response.ok) {
    let detail = String(response.status);
    try { const p = await response.json(); detail = `${p.status} ${p.title}: ${p.detail}`; } catch { /* not JSON */ }
    const error = new Error(detail); error.status = response.status; throw error;
  }
  return response.status === 204 ? null : response.json();
};
rw.post = (path, body) => rw.api(path, {method: "POST", body: body === undefined ? undefined : JSON.stringify(body)});

// Follow a server-sent event stream (a fetch stream: it parses frames of any event kind,
// which an EventSource only delivers to a listener per kind), from after `after`. After
// a drop it reconnects from the last id seen. Resolves once the server answers 204 (the
// stream is complete) or `signal` aborts; rejects on a 4xx (a run or thread not found,
// a deleted thread), whose problem is the error's message.
// An event's id is a seq (a run's stream) or `<incarnation>:<tseq>` (a thread's: the
// reconnect names the thread it followed, so a new thread of the name answers 410).
rw.resumeQuery = id => {
  const text = String(id), cut = text.indexOf(":");
  return cut < 0 ? `after=${text}` : `after=${text.slice(cut + 1)}&incarnation=${text.slice(0, cut)}`;
};
rw.follow = async (path, after, signal, onEvent) => {
  let last = String(after);
  while (!signal.aborted) {
    let response = null;
    try {
      const decoding = rw.decoding(path);
      response = await fetch(`${decoding}${decoding.includes("?") ? "&" : "?"}${rw.resumeQuery(last)}`,
                             {credentials: "same-origin", signal});
      if (response.status === 204) return;
      if (response.ok) await rw.frames(response, (id, data) => { if (id !== null) last = id; onEvent(data); });
    } catch { /* dropped (or aborted): reconnect below */ }
    if (response && response.status >= 400 && response.status < 500) {
      let detail = String(response.status);
      try { const p = await response.json(); detail = `${p.status} ${p.title}: ${p.detail}`; } catch { /* not JSON */ }
      throw Object.assign(new Error(detail), {status: response.status});
    }
    if (!signal.aborted) await new Promise(resolve => setTimeout(resolve, 1000));
  }
};
// Read a stream's frames until it ends: each event's id and JSON data to onFrame.
rw.frames = async (response, onFrame) => {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const {value, done} = await reader.read();
    if (done) return;
    buffer += value;
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const lines = buffer.slice(0, cut).split("\n"); buffer = buffer.slice(cut + 2);
      const id = lines.find(line => line.startsWith("id: "));
      const data = lines.find(line => line.startsWith("data: "));
      if (data) onFrame(id ? id.slice(4) : null, JSON.parse(data.slice(6)));
    }
  }
};

// el("td", {className: "x", dataset: {id: 1}}, "text", node): an element with children.
rw.el = (tag, props = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === "dataset") Object.assign(node.dataset, v);
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node[k] = v;
  }
  node.append(...children.filter(c => c !== null && c !== undefined).map(c => c instanceof Node ? c : String(c)));
  return node;
};
rw.link = (href, text) => rw.el("a", {href}, text);
rw.runLink = id => rw.link(`#/runs/${id}`, id);
rw.state = state => rw.el("span", {className: `state state-${state}`}, state);
rw.fill = (selector, rows, empty) => {
  // rows: arrays of cells (text or nodes), or {cells, props} for row attributes. A table
  // with no row says what would be there and how to get some: `empty`, else its
  // data-empty (in a caption: the body holds rows only).
  document.querySelector(`${selector} tbody`).replaceChildren(...rows.map(row => {
    const {cells, props} = Array.isArray(row) ? {cells: row, props: {}} : row;
    return rw.el("tr", props, ...cells.map(c => c instanceof HTMLTableCellElement ? c : rw.el("td", {}, c)));
  }));
  rw.empty(selector, rows.length === 0, empty);
};
// Show (or take away) a table's empty-state note; `text` overrides its data-empty.
rw.empty = (selector, isEmpty, text) => {
  const table = document.querySelector(selector);
  let caption = table.querySelector(":scope > caption.empty");
  if (!isEmpty) { if (caption) caption.remove(); return; }
  if (!caption) { caption = table.createCaption(); caption.className = "empty"; }
  const said = text ?? table.dataset.empty ?? "Nothing here yet.";
  if (caption.dataset.said !== said) { caption.dataset.said = said; caption.replaceChildren(...rw.rich(said)); }
};
// Text with `code` spans, as nodes (never HTML: what is shown may come from a run).
rw.rich = text => String(text).split("`").map((part, i) => i % 2 ? rw.el("code", {}, part) : document.createTextNode(part));
// Every time shown is UTC and says so, as the time filters are read.
rw.time = t => t == null ? "" : new Date(t * 1000).toISOString().replace("T", " ").slice(0, 19) + " UTC";
rw.iso = t => t == null ? "" : new Date(t * 1000).toISOString().slice(0, 19) + "Z";
// What a run waits for (the server's `waiting`: null, or {reason, until, detail}), as a
// badge with the detail for a tooltip; null when the run waits for nothing or the server
// does not say (an older one sends no `waiting` at all).
rw.waitingText = w => {
  if (!w || typeof w !== "object" || !w.reason) return null;
  const until = typeof w.until === "number" ? rw.time(w.until) : null;
  if (w.reason === "sleep" && until) return `sleeping until ${until}`;
  return `waiting: ${String(w.reason).replace("_", " ")}${until ? ` until ${until}` : ""}`;
};
rw.waiting = run => {
  const w = run ? run.waiting : null, text = rw.waitingText(w);
  return text === null ? null : rw.el("span", {className: "waiting", title: w.detail ? String(w.detail) : "",
                                               dataset: {reason: String(w.reason)}}, text);
};
rw.duration = s => {
  if (s == null) return "";
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 120) return `${s.toFixed(2)} s`;
  if (s < 7200) return `${(s / 60).toFixed(1)} min`;
  return `${(s / 3600).toFixed(1)} h`;
};
rw.ago = t => t == null ? "" : rw.duration(Math.max(0, Date.now() / 1000 - t)) + " ago";
rw.took = run => run.started_at != null && run.finished_at != null ? rw.duration(run.finished_at - run.started_at) : "";
rw.json = value => JSON.stringify(value, null, 2);
rw.flash = text => { document.getElementById("flash").textContent = text || ""; };
rw.operator = () => rw.me !== null && rw.me.operator;

// -- routing: #/<view>[/<arg>][?query], e.g. #/runs?state=dead, #/runs/12 --------------
rw.parse = () => {
  const [path, query] = (location.hash.slice(1) || "/overview").split("?");
  const parts = path.split("/").filter(Boolean);
  let name = parts[0] || "overview";
  const arg = parts.length > 1 ? decodeURIComponent(parts.slice(1).join("/")) : null;
  if (arg !== null && name === "runs") name = "run";
  if (arg !== null && name === "threads") name = "thread";
  return {name, arg, params: new URLSearchParams(query || "")};
};

rw.route = async () => {
  if (rw.me === null) return rw.show("signin");
  const {name, arg, params} = rw.parse();
  const view = rw.views[name] ? name : "overview";
  rw.show(view);
  document.querySelectorAll("#nav a").forEach(a => a.classList.toggle(
    "active", a.dataset.view === view || (a.dataset.view + "s" === view) || a.dataset.view === view + "s"));
  // This visit's view, held here: a navigation while it loads replaces rw.current (and
  // counts a new visit), and then this visit neither flashes its error nor starts a timer.
  const current = rw.current = rw.views[view], visit = rw.visit;
  rw.flash("");
  try { await current.show(arg, params); } catch (error) { if (visit === rw.visit) rw.flash(String(error.message || error)); }
  if (visit !== rw.visit || !current.refresh) return;
  rw.timer = setInterval(() => current.refresh().catch(error => rw.flash(String(error.message))), 3000);
};

// Leave the current page for `name`: its timer stops and a visit still loading is over.
rw.show = name => {
  clearInterval(rw.timer);
  rw.timer = null;
  rw.visit += 1;
  if (rw.current && rw.current.leave) rw.current.leave();
  rw.current = null;
  document.querySelectorAll("main > section").forEach(s => { s.hidden = s.id !== `view-${name}`; });
};

// -- signing in --------------------------------------------------------------------
// Who the caller is and what it cannot see, in one line (GET /session's answer).
rw.whoami = me => {
  if (!me.auth) return "no sign-in (RUNWRIGHT_AUTH=off): every run";
  if (me.operator) return "signed in as the operator: every run";
  return `signed in as tenant ${me.tenant}: runs of other tenants and runs submitted with no tenant ` +
         "(from Python or the CLI) are hidden \u2014 sign in with an operator token to see them";
};
rw.signedIn = me => {
  rw.me = me;
  document.getElementById("whoami").textContent = rw.whoami(me);
  document.getElementById("nav").hidden = false;
  document.getElementById("sign-out").hidden = !me.auth;  // without auth there is no session
  document.body.classList.toggle("tenant", !me.operator);
  document.querySelectorAll(".operator-only").forEach(n => { n.hidden = !me.operator; });
  document.getElementById("decode-switch").hidden = !me.operator_decode;
  if (!me.operator_decode) rw.setDecode(false);
};
rw.setDecode = on => {
  rw.decode = on;
  document.getElementById("decode").checked = on;
};
rw.signedOut = () => {
  rw.me = null;
  rw.setDecode(false);
  document.getElementById("decode-switch").hidden = true;
  document.getElementById("whoami").textContent = "";
  document.getElementById("nav").hidden = true;
  document.getElementById("sign-out").hidden = true;
  rw.show("signin");
};

// A sign-in link (`runwright serve` prints one when it made a one-off token) carries the
// token in the URL's fragment, which the browser never sends to a server. It is taken out
// of the address bar (and this history entry) at once, whether it signs in or not.
rw.linkToken = () => {
  const match = /^#token=([^&/?]+)$/.exec(location.hash);
  if (!match) return null;
  history.replaceState(null, "", location.pathname + location.search);
  try { return decodeURIComponent(match[1]); } catch { return match[1]; }
};

rw.start = async () => {
  document.getElementById("login").addEventListener("submit", async event => {
    event.preventDefault();
    try {
      rw.signedIn(await rw.api("/session", {method: "POST",
        body: JSON.stringify({token: document.getElementById("token").value})}));
      document.getElementById("token").value = "";
      rw.route();
    } catch (error) { rw.flash(error.status === 401 ? "that token is not one of this server's" : error.message); }
  });
  document.getElementById("sign-out").addEventListener("click", async () => {
    await rw.api("/session", {method: "DELETE"});
    rw.signedOut();
  });
  window.addEventListener("hashchange", () => rw.route());
  document.getElementById("decode").addEventListener("change", event => {
    rw.setDecode(event.target.checked);
    rw.route();  // the page read again, decoded or sealed
  });
  const token = rw.linkToken();
  if (token !== null) {
    try {
      rw.signedIn(await rw.api("/session", {method: "POST", body: JSON.stringify({token})}));
      return rw.route();
    } catch (error) {
      rw.signedOut();
      return rw.flash(error.status === 401 ? "the sign-in link's token is not this server's (a one-off token " +
        "lasts as long as the `runwright serve` that printed it): use the link it printed last" : error.message);
    }
  }
  try { rw.signedIn(await rw.api("/session")); } catch { return rw.signedOut(); }  // 401: sign in
  rw.route();
};
