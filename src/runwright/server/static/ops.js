"use strict";
// Threads and their history; schedules (pause, resume); dead letters (bulk retry);
// workers and the fleet.
(() => {
  const tenantQuery = tenant => tenant ? `?tenant=${encodeURIComponent(tenant)}` : "";

  // -- threads: the store lists no threads, so this lists those of the latest runs ------
  async function threads() {
    const page = await rw.api("/runs?limit=500");
    const seen = new Map();
    for (const run of page.items) {  // newest first: the first run seen is a thread's last
      if (!run.thread) continue;
      const id = `${run.tenant || ""}\u0000${run.thread}`;
      const entry = seen.get(id) || {run, count: 0};
      entry.count += 1;
      seen.set(id, entry);
    }
    rw.fill("#threads", [...seen.values()].map(({run, count}) => ({props: {dataset: {thread: run.thread}},
      cells: [rw.link(`#/threads/${encodeURIComponent(run.thread)}${rw.operator() ? tenantQuery(run.tenant) : ""}`, run.thread),
              ...(rw.operator() ? [run.tenant || ""] : []), count, rw.runLink(run.id), rw.state(run.state),
              rw.time(run.finished_at || run.started_at || run.created_at)]})));
  }

  let thread = null;
  async function showThread(arg, params) {
    thread = {name: arg, tenant: params.get("tenant")};
    document.getElementById("thread-name").textContent = arg + (thread.tenant ? ` (tenant ${thread.tenant})` : "");
    await refreshThread();
  }

  async function refreshThread() {
    const base = `/threads/${encodeURIComponent(thread.name)}`;
    const q = tenantQuery(thread.tenant);
    const [messages, runs, events] = await Promise.all([
      rw.api(`${base}/messages${q}`), rw.api(`${base}/runs${q}`), rw.api(`${base}/events${q}`)]);
    document.getElementById("thread-messages").replaceChildren(...(messages.messages.length ? messages.messages.map(m =>
      rw.el("div", {className: "message"}, rw.el("span", {className: "role"}, m.role || "?"),
            typeof m.content === "string" ? m.content : rw.json(m.content ?? m))) : [rw.el("p", {className: "hint"}, "no messages")]));
    rw.fill("#thread-runs", runs.items.map(r => ({props: {dataset: {id: r.id}},
      cells: [rw.runLink(r.id), r.task, rw.state(r.state), rw.time(r.created_at)]})));
    document.getElementById("thread-events").replaceChildren(...events.items.map(e =>
      rw.el("div", {className: "event"}, `${e.tseq} run ${e.run_id}#${e.seq} `, rw.el("span", {className: "kind"}, e.kind),
            Object.keys(e.data).length ? " " + JSON.stringify(e.data) : "")));
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
      note.textContent = "Schedules are the deployment's: sign in with an operator token to see them.";
      return rw.fill("#schedules", []);
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
      rw.fill("#fleet", []);
    }
  }

  rw.views.threads = {show: threads, refresh: threads};
  rw.views.thread = {show: showThread, refresh: () => refreshThread()};
  rw.views.schedules = {show: schedules, refresh: schedules};
  rw.views.dead = {show: dead, refresh: dead};
  rw.views.workers = {show: workers, refresh: workers};
})();
