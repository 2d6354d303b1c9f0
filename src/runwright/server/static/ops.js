"use strict";
// Threads (listed, and one followed live); schedules (pause, resume); dead letters (bulk retry);
// workers and the fleet.
(() => {
  const tenantQuery = tenant => tenant ? `?tenant=${encodeURIComponent(tenant)}` : "";

  // -- threads: newest first, a page at a time (the server's cursor), as runs are ------
  const PAGE = 50;
  const threadLink = t => rw.link(`#/threads/${encodeURIComponent(t.thread)}${rw.operator() ? tenantQuery(t.tenant) : ""}`,
                                  t.thread);

  // The latest listing wins: a refresh answered after a click on Older (or the other
  // way round) is dropped, not laid over it; a refresh waits while a listing is out.
  let listing = 0, listingOut = false;
  async function listThreads(after) {
    const mine = ++listing;
    const q = new URLSearchParams({limit: String(PAGE)});
    if (after) q.set("after", after);
    if (document.getElementById("threads-deleted").checked) q.set("include_deleted", "true");
    listingOut = true;
    let page;
    try { page = await rw.api(`/threads?${q}`); } finally { if (mine === listing) listingOut = false; }
    if (mine !== listing) return;
    const rows = page.items.map(t => ({props: {className: t.deleted ? "deleted" : "",
                                               dataset: {thread: t.thread, tenant: t.tenant || "", busy: t.busy}},
      cells: [threadLink(t), ...(rw.operator() ? [t.tenant || ""] : []), rw.time(t.created_at), t.runs,
              t.busy ? `${t.open_runs} (busy)` : "0", t.last_run_id ? rw.runLink(t.last_run_id) : "",
              t.last_run_state ? rw.state(t.last_run_state) : "", t.deleted ? `deleted ${rw.time(t.deleted_at)}` : ""]}));
    const body = document.querySelector("#threads tbody");
    const shown = after ? [...body.children] : [];
    rw.fill("#threads", rows);
    body.prepend(...shown);
    const older = document.getElementById("threads-older");
    older.hidden = page.next_cursor === null;
    older.onclick = () => listThreads(page.next_cursor).catch(e => rw.flash(e.message));
    document.getElementById("threads-count").textContent = `${body.children.length} shown`;
    rw.empty("#threads", body.children.length === 0);
  }
  document.getElementById("threads-deleted").addEventListener("change", () => listThreads(null).catch(e => rw.flash(e.message)));
  // Kept live while only the newest page is shown (paging older stops it).
  const refreshThreads = () => !listingOut && document.querySelectorAll("#threads tbody tr").length <= PAGE
    ? listThreads(null) : Promise.resolve();

  // -- one thread: its history and runs, and its log followed live over SSE -----------
  let thread = null;
  let following = null;
  let reloading = null;
  const threadPath = () => `/threads/${encodeURIComponent(thread.name)}`;

  async function showThread(arg, params) {
    thread = {name: arg, tenant: params.get("tenant")};
    document.getElementById("thread-name").textContent = arg + (thread.tenant ? ` (tenant ${thread.tenant})` : "");
    document.getElementById("thread-events").replaceChildren();
    modelCalls = [];
    showThreadTotals();
    await loadThread();
    followThread();
  }

  async function loadThread() {
    const current = thread;
    if (current === null) return;
    const q = tenantQuery(current.tenant);
    const [messages, runs] = await Promise.all([
      rw.api(`${threadPath()}/messages${q}`), rw.api(`${threadPath()}/runs${q}`)]);
    if (current !== thread) return;
    document.getElementById("thread-messages").replaceChildren(...(messages.messages.length
      ? rw.conversation.messageCards(messages.messages)
      : [rw.el("p", {className: "hint"}, ...rw.rich("No messages yet. An agent run of this thread adds its conversation here; " +
                                                    "a task adds none."))]));
    rw.fill("#thread-runs", runs.items.map(r => ({props: {dataset: {id: r.id}},
      cells: [rw.runLink(r.id), r.task, rw.el("td", {}, rw.state(r.state), rw.waiting(r)), rw.time(r.created_at)]})));
    const cancel = document.getElementById("thread-cancel");
    cancel.disabled = !runs.items.some(r => ["queued", "running"].includes(r.state));
    cancel.onclick = () => cancelThread(current);
  }

  async function cancelThread(current) {
    try {
      const cancelled = await rw.post(`${threadPath()}/cancel${tenantQuery(current.tenant)}`);
      rw.flash(`${cancelled.items.length} open run(s) cancelled`);
      await loadThread();
    } catch (error) { rw.flash(error.message); }
  }

  // The thread's log, every run's events in one order (tseq), from its start: the
  // stream stays open for the thread's next runs too. History and runs follow the log.
  function followThread() {
    if (following) following.abort();
    const control = following = new AbortController();
    const note = document.getElementById("thread-follow");
    note.textContent = "(following live)";
    rw.follow(`${threadPath()}/events/stream${tenantQuery(thread.tenant)}`, 0, control.signal, showThreadEvent)
      .catch(error => { if (!control.signal.aborted) { note.textContent = ""; rw.flash(error.message); } });
  }

  // The thread's model calls, from its log as it streams in: its totals.
  let modelCalls = [];
  function showThreadTotals() {
    const box = document.getElementById("thread-totals");
    box.replaceChildren(...(modelCalls.length ? [rw.conversation.totalOf("thread", "Thread", modelCalls)] : []));
  }

  function showThreadEvent(e) {
    if (e.tseq === undefined) {  // thread_deleted: the stream ends, and its reconnect is told 410
      document.getElementById("thread-follow").textContent = "(deleted)";
      return;
    }
    if (e.kind === "model") { modelCalls.push(e.data); showThreadTotals(); }
    document.getElementById("thread-events").append(rw.el("div", {className: "event", dataset: {tseq: e.tseq, kind: e.kind}},
      `${e.tseq} run ${e.run_id}#${e.seq} `, rw.el("span", {className: "kind"}, e.kind), " ", rw.el("span", {className: "nowrap"}, rw.time(e.at)),
      Object.keys(e.data).length ? " " + JSON.stringify(e.data) : ""));
    clearTimeout(reloading);  // once a burst of events is over
    reloading = setTimeout(() => loadThread().catch(error => rw.flash(error.message)), 300);
  }

  document.getElementById("thread-open").addEventListener("submit", event => {
    event.preventDefault();
    const f = event.target.elements;
    location.hash = `#/threads/${encodeURIComponent(f.thread.value.trim())}${tenantQuery(f.tenant.value.trim())}`;
  });

  // -- schedules: the deployment's, so the operator's ---------------------------------
  async function schedules() {
    const note = document.getElementById("schedules-note");
    let found;
    try { found = await rw.api("/schedules"); } catch (error) {
      if (error.status !== 403) throw error;
      note.textContent = "";  // said once, where the rows would be
      return rw.fill("#schedules", [], "Schedules are the deployment's, so the operator's: this token is a " +
                     "tenant's. Sign in with an operator token to see them.");
    }
    note.textContent = `${found.length} schedules; times in UTC.`;
    const now = Date.now() / 1000;
    rw.fill("#schedules", found.map(s => {
      const toggle = rw.el("button", {className: s.paused ? "resume" : "pause", onclick: async () => {
        try { await rw.post(`/schedules/${encodeURIComponent(s.name)}/${s.paused ? "resume" : "pause"}`); await schedules(); }
        catch (error) { rw.flash(error.message); }
      }}, s.paused ? "Resume" : "Pause");
      return {props: {dataset: {name: s.name, paused: s.paused}},
              cells: [s.name, s.cron, s.tz, s.task, s.queue,
                      `${rw.time(s.next_fire_at)} (in ${rw.duration(Math.max(0, s.next_fire_at - now))})`,
                      s.paused ? "paused" : "active", rw.el("td", {}, toggle)]};
    }));
  }

  // -- dead letters: pick some (or all shown), retry them in one request ---------------
  const picked = () => [...document.querySelectorAll("#dead input.pick:checked")].map(i => Number(i.dataset.id));
  const updatePicked = () => { document.getElementById("retry-selected").disabled = picked().length === 0; };

  // The same bulk actions as the runs list's, over every dead run (a tenant's own).
  let bulk = null;
  const showDead = () => {
    bulk = bulk || rw.bulk(document.getElementById("dead-bulk"), {
      actions: ["retry", "fork"], filter: () => ({body: {states: ["dead"]}, text: "every dead run"}),
      done: () => dead().catch(e => rw.flash(e.message))});
    bulk.reset();
    return dead();
  };

  async function dead() {
    const keep = new Set(picked());
    const page = await rw.api("/dead?limit=200");
    rw.fill("#dead", page.items.map(run => {
      const box = rw.el("input", {type: "checkbox", className: "pick", checked: keep.has(run.id), dataset: {id: run.id},
                                  onchange: updatePicked});
      const retry = rw.el("button", {className: "retry", dataset: {id: run.id},
                                     onclick: () => retryIds([run.id])}, "retry");
      return {props: {dataset: {id: run.id}},
              cells: [rw.el("td", {}, box), rw.runLink(run.id), run.task, run.queue, `${run.attempt}/${run.max_attempts}`,
                      rw.time(run.finished_at),
                      rw.el("td", {className: "error"}, run.error ? `${run.error.type}: ${run.error.message}` : ""),
                      rw.el("td", {}, retry)]};
    }));
    updatePicked();
  }

  async function retryIds(ids) {
    try {
      const answer = await rw.post("/dead/retry", {ids});
      document.getElementById("dead-result").textContent = `re-queued ${answer.retried.length}` +
        (answer.refused.length ? `; refused: ${answer.refused.map(r => `${r.id} (${r.reason})`).join(", ")}` : "");
      document.getElementById("dead-all").checked = false;
      document.querySelectorAll("#dead input.pick").forEach(i => { i.checked = false; });
      await dead();
    } catch (error) { rw.flash(error.message); }
  }

  document.getElementById("retry-selected").addEventListener("click", () => retryIds(picked()));
  document.getElementById("dead-all").addEventListener("change", event => {
    document.querySelectorAll("#dead input.pick").forEach(i => { i.checked = event.target.checked; });
    updatePicked();
  });

  // -- workers and the fleet -----------------------------------------------------------
  async function workers() {
    const found = await rw.api("/workers");
    rw.fill("#workers", found.map(w => ({props: {dataset: {id: w.id}},
      cells: [w.id, w.host, w.pid, w.queues.join(", "), rw.time(w.started_at), rw.ago(w.heartbeat_at)]})));
    // The fleet is the operator's: a tenant's token reads 403, shown as such, not as an error.
    const note = document.getElementById("fleet-note");
    try {
      const fleet = await rw.api("/fleet");
      note.textContent = `(${fleet.root})`;
      rw.fill("#fleet", fleet.processes.map(p => ({props: {dataset: {name: p.name}},
        cells: [p.name, p.generation, rw.el("td", {className: `fleet-${p.state}`}, p.state), p.host, p.pid,
                `${p.heartbeat_age_s.toFixed(1)} s`]})));
    } catch (error) {
      if (error.status !== 403) throw error;
      note.textContent = "(operator token only)";
      rw.fill("#fleet", [], "The fleet is the operator's: sign in with an operator token to see its processes.");
    }
  }

  rw.views.threads = {show: () => listThreads(null), refresh: refreshThreads};
  rw.views.thread = {show: showThread, leave: () => {
    if (following) following.abort();
    following = null; thread = null; clearTimeout(reloading);
  }};
  rw.views.schedules = {show: schedules, refresh: schedules};
  rw.views.dead = {show: showDead, refresh: dead};
  rw.views.workers = {show: workers, refresh: workers};
})();
