"use strict";
// Runs: the filtered list (its filters live in the URL, so a view can be shared), and
// one run's page: attempts on a timeline, steps, children, error, and its log live.
(() => {
  const FILTERS = ["state", "task", "queue", "thread", "tenant", "key", "error", "waiting", "created_after",
                   "created_before"];
  const TIMES = new Set(["created_after", "created_before"]);
  const FORKS_SHOWN = 50;  // a run's forks named on its page (the newest; "..." when there are more)
  const form = () => document.getElementById("run-filters");
  // The time filters are UTC, as every time shown is: a datetime-local input holds a
  // wall-clock time with no zone, read here as UTC (not the browser's zone); the API
  // takes epoch seconds.
  const toEpoch = value => String(Date.parse(`${value.length === 16 ? value + ":00" : value}Z`) / 1000);
  const toInput = epoch => new Date(Number(epoch) * 1000).toISOString().slice(0, 19);

  let query = new URLSearchParams();

  // Bulk actions over the list's filter (the URL's, as shown): POST /bulk takes its state,
  // task, queue, tenant, error text and time range; not a thread, key or waiting filter.
  const BULK_TAKES = {state: "state", task: "task", queue: "queue", tenant: "tenant", error: "error text",
                      created_after: "from", created_before: "to"};
  const bulkFilter = () => {
    const body = {}, said = [];
    const untaken = ["thread", "key", "waiting"].filter(name => query.get(name));
    for (const [name, label] of Object.entries(BULK_TAKES)) {
      const value = query.get(name);
      if (!value) continue;
      if (name === "state") body.states = [value];
      else body[name] = TIMES.has(name) ? Number(value) : value;
      said.push(`${label} \`${TIMES.has(name) ? rw.time(Number(value)) : value}\``);
    }
    return {body, text: said.length ? `the runs of this filter: ${said.join(", ")}` : "every run (the list has no filter)",
            blocked: untaken.length ? `Bulk actions filter by state, task, queue, tenant, error text and time: ` +
                                      `clear the ${untaken.join(", ")} filter for them.` : null};
  };
  let bulk = null;
  async function showRuns(_arg, params) {
    query = params;
    bulk = bulk || rw.bulk(document.getElementById("runs-bulk"), {
      actions: ["retry", "cancel", "resume", "fork"], filter: bulkFilter,
      done: () => listRuns(null).catch(e => rw.flash(e.message))});
    bulk.reset();
    for (const name of FILTERS) {
      const value = params.get(name) || "";
      form().elements[name].value = TIMES.has(name) && value ? toInput(value) : value;
    }
    await listRuns(null);
  }

  async function listRuns(before) {
    const q = new URLSearchParams(query);
    q.set("limit", "50");
    if (before) q.set("before", before);
    const page = await rw.api(`/runs?${q}`);
    // A server that does not report what runs wait for (no `waiting` in its runs) cannot
    // filter by it either: the filter is then applied here, and finds nothing.
    const waitingFilter = q.get("waiting");
    const unreported = waitingFilter && page.items.length > 0 && !("waiting" in page.items[0]);
    const items = waitingFilter ? page.items.filter(r => r.waiting && r.waiting.reason === waitingFilter) : page.items;
    const note = document.getElementById("runs-note");
    note.hidden = !unreported;
    note.textContent = unreported ? "This server does not report what runs wait for: the waiting filter finds none." : "";
    const rows = items.map(run => ({props: {className: "run", dataset: {id: run.id},
                                            onclick: () => { location.hash = `#/runs/${run.id}`; }},
      cells: [rw.runLink(run.id), run.task, run.queue,
              run.thread ? rw.link(`#/threads/${encodeURIComponent(run.thread)}` +
                                   (rw.operator() && run.tenant ? `?tenant=${encodeURIComponent(run.tenant)}` : ""), run.thread) : "",
              ...(rw.operator() ? [run.tenant || ""] : []), rw.el("td", {className: "state-cell"}, rw.state(run.state), rw.waiting(run)),
              `${run.attempt}/${run.max_attempts}`, rw.time(run.created_at), rw.took(run)]}));
    if (before) {
      const body = document.querySelector("#runs tbody");
      const current = [...body.children];
      rw.fill("#runs", rows);
      body.prepend(...current);
    } else {
      rw.fill("#runs", rows);
    }
    const older = document.getElementById("runs-older");
    older.hidden = page.next_cursor === null;
    older.onclick = () => listRuns(page.next_cursor).catch(e => rw.flash(e.message));
    const shown = document.querySelectorAll("#runs tbody tr").length;
    document.getElementById("runs-count").textContent = `${shown} shown`;
    const filtered = FILTERS.some(name => query.get(name));
    rw.empty("#runs", shown === 0, filtered
      ? "No run matches these filters. Change them, or clear them to see every run (the time range is in UTC)."
      : "No runs yet. Submit one with `POST /runs {\"task\": ..., \"args\": {...}}` or `runwright submit APP TASK`; it shows here at once.");
  }

  document.addEventListener("DOMContentLoaded", () => {
    form().addEventListener("submit", event => {
      event.preventDefault();
      const q = new URLSearchParams();
      for (const name of FILTERS) {
        const value = form().elements[name].value.trim();
        if (value) q.set(name, TIMES.has(name) ? toEpoch(value) : value);
      }
      location.hash = `#/runs?${q}`;
    });
  });

  // -- one run --------------------------------------------------------------------
  let following = null;
  let runId = null;
  let reloading = null;
  let lastSeq = 0;  // the last event of the run's log shown
  let followEnded = false;  // the server said the log was complete (204)

  async function showRun(arg) {
    runId = Number(arg);
    lastSeq = 0;
    document.getElementById("run-id").textContent = runId;
    blank();  // nothing of the run shown before stays, should this one not be found
    await load();
    follow(runId);
  }

  function blank() {
    actions(null);
    for (const id of ["events", "run-state", "run-fields", "run-timeline", "run-follow", "run-task", "run-waiting",
                      "run-gantt", "run-tree", "conv-cards", "conv-totals"]) {
      document.getElementById(id).replaceChildren();
    }
    for (const id of ["#run-steps", "#run-children"]) rw.fill(id, []);
    document.getElementById("run-error").hidden = true;
    document.getElementById("run-conversation").hidden = true;
    document.getElementById("run-waiting-detail").hidden = true;
    family = null;
    thread = null;
  }

  // Cancel, Retry, Pause and Resume as `run` allows; all disabled while no run is known
  // (not found, expired, not yet read), so that no click acts on a run the page does not
  // show. A paused run is queued and waits on "paused"; a running one may be asked to
  // pause (it stops at its next step), and a resume takes that back.
  function actions(run) {
    const cancel = document.getElementById("run-cancel"), retry = document.getElementById("run-retry");
    const pause = document.getElementById("run-pause"), resume = document.getElementById("run-resume");
    const paused = run !== null && run.state === "queued" && run.waiting !== null && run.waiting.reason === "paused";
    const asked = run !== null && run.state === "running" && run.pause_requested;
    cancel.disabled = run === null || !["queued", "running"].includes(run.state);
    retry.disabled = run === null || !["dead", "failed"].includes(run.state);
    pause.disabled = run === null || !["queued", "running"].includes(run.state) || paused || asked;
    resume.disabled = !(paused || asked);
    cancel.onclick = run === null ? null : () => act(`/runs/${run.id}/cancel`);
    retry.onclick = run === null ? null : () => act(`/runs/${run.id}/retry`);
    pause.onclick = run === null ? null : () => act(`/runs/${run.id}/pause`);
    resume.onclick = run === null ? null : () => act(`/runs/${run.id}/resume`);
  }

  async function load() {
    const id = runId;
    if (id === null) return;
    let found;
    try {
      found = await Promise.all([rw.api(`/runs/${id}`), rw.api(`/runs/${id}/attempts`),
                                 rw.api(`/runs/${id}/steps`), rw.api(`/runs/${id}/children`),
                                 rw.api(`/runs/${id}/signals`), rw.api(`/runs/${id}/state`),
                                 rw.api(`/runs?forked_from=${id}&limit=${FORKS_SHOWN}`)]);
    } catch (error) {
      if (id === runId) actions(null);
      throw error;
    }
    const [run, attempts, steps, children, signals, published, forks] = found;
    if (id !== runId) return;
    document.getElementById("run-state").replaceChildren(rw.state(run.state));
    document.getElementById("run-task").textContent = run.task;
    const badge = rw.waiting(run);
    document.getElementById("run-waiting").replaceChildren(...(badge ? [badge] : []));
    const detail = document.getElementById("run-waiting-detail");
    detail.hidden = !(badge && run.waiting.detail);
    detail.textContent = badge && run.waiting.detail ? String(run.waiting.detail) : "";
    actions(run);
    fields(run, forks.items);
    const error = document.getElementById("run-error");
    error.hidden = !run.error;
    if (run.error) {
      error.querySelector("pre").textContent = `${run.error.type}: ${run.error.message}\n\n${run.error.traceback || "(no traceback recorded)"}`;
    }
    // A fork's copied entries were recorded by its original, before the fork was made: they
    // are in its step list (marked copied), not on its attempts' time axis.
    const copied = s => run.forked_from !== null && s.recorded_at < run.created_at;
    timeline(run, attempts, steps.filter(s => !copied(s)));
    gantt(run, attempts, steps.filter(s => !copied(s)));
    conversation(run, attempts, steps);
    await tree(run, children.items);
    const start = attempts.length ? attempts[0].started_at : run.created_at;
    let previous = steps.length && copied(steps[0]) ? steps[0].recorded_at : start;
    rw.fill("#run-steps", steps.map((s, i) => {
      if (i && copied(steps[i - 1]) && !copied(s)) previous = start;  // the fork's own, from its start
      const since = s.recorded_at - previous; previous = s.recorded_at;
      const shown = s.error ? `${s.error.type}: ${s.error.message}` : JSON.stringify(s.result);
      return {props: {dataset: {position: s.position}},
              cells: [s.position, s.name, rw.state(s.status === "done" ? "succeeded" : s.status),
                      copied(s) ? `copied from run ${run.forked_from}` : `${attemptOf(attempts, s.fence)} (${s.fence})`,
                      rw.time(s.recorded_at),
                      rw.duration(Math.max(0, since)),
                      rw.el("td", {className: "wrap"}, s.child_id ? rw.el("span", {}, "child ", rw.runLink(s.child_id))
                                                                  : (shown || "").slice(0, 200)),
                      forkButton(run, s)]};
    }));
    // Each signal, and which wait took it (its step in the list above), or why not.
    rw.fill("#run-signals", signals.map(g => ({props: {dataset: {seq: g.seq}},
      cells: [g.seq, g.name, rw.el("td", {className: "wrap"}, JSON.stringify(g.payload).slice(0, 200)),
              rw.time(g.sent_at), g.sent_by || "-",
              g.position !== null ? `by step #${g.position}, ${rw.time(g.taken_at)}`
                                  : g.withdrawn_at ? "withdrawn by its sender" : "pending"]})));
    rw.fill("#run-state-published", Object.entries(published.state).map(([key, value]) =>
      [key, rw.el("td", {className: "wrap"}, JSON.stringify(value).slice(0, 500))]));
    rw.fill("#run-children", children.items.map(c => ({props: {dataset: {id: c.id}},
      cells: [rw.runLink(c.id), c.task, rw.state(c.state), rw.took(c)]})));
  }

  // "Fork here": a new run whose journal holds this run's entries before this step (their
  // results replayed), which runs this step and the rest on the code deployed now; the page
  // then shows the fork. A run of a thread is not forked (the server says so): disabled.
  function forkButton(run, step) {
    const title = run.thread ? "a run of a thread cannot be forked"
                             : `a new run that keeps steps 0 to ${step.position - 1} and runs from this one on`;
    return rw.el("td", {}, rw.el("button", {className: "fork-step", disabled: Boolean(run.thread), title,
                                            onclick: () => fork(run.id, step.position)}, "Fork here"));
  }

  async function fork(id, position) {
    try {
      const made = await rw.post(`/runs/${id}/fork`, {from_step: position});
      location.hash = `#/runs/${made.id}`;
    } catch (error) { rw.flash(error.message); }
  }

  // The attempt a claim (its fence) served: the run's own numbering, as the API gives it
  // (a takeover or a park continues an attempt in a new claim), not a claim's rank.
  const attemptOf = (attempts, fence) => { const a = attempts.find(x => x.fence === fence); return a ? a.attempt : "?"; };

  // A retry (or any change) of a run whose log was complete goes on with its log: the
  // stream is opened again after the last event shown, so the page says `retried` and
  // shows the new attempt (the server answers 204 again if nothing was added).
  async function act(path) {
    try {
      await rw.post(path);
      await load();
      if (followEnded && runId !== null) follow(runId);
    } catch (error) { rw.flash(error.message); }
  }

  function fields(run, forks) {
    const rows = [["task", run.task], ["queue", `${run.queue} (priority ${run.priority})`], ["key", run.key],
      ["tenant", run.tenant || "(none)"],
      ...(run.forked_from ? [["forked from", rw.runLink(run.forked_from)]] : []),
      ...(forks.length ? [["forks", rw.el("span", {}, ...forks.flatMap((f, i) => i ? [", ", rw.runLink(f.id)]
                                                                                : [rw.runLink(f.id)]),
                                         forks.length === FORKS_SHOWN ? ", ..." : "")]] : []),
      ["thread", run.thread ? rw.link(`#/threads/${encodeURIComponent(run.thread)}` +
                                      (run.tenant && rw.operator() ? `?tenant=${encodeURIComponent(run.tenant)}` : ""), run.thread) : ""],
      ["parent", run.parent_id ? rw.runLink(run.parent_id) : "(none)"],
      ...(rw.waitingText(run.waiting) ? [["waiting", rw.waitingText(run.waiting) +
                                          (run.waiting.detail ? ` (${run.waiting.detail})` : "")]] : []),
      ["attempt", `${run.attempt} of ${run.max_attempts}`], ["created", rw.time(run.created_at)],
      ["due", rw.time(run.run_at)], ["started", rw.time(run.started_at)], ["finished", rw.time(run.finished_at)],
      ["took", rw.took(run)], ["args", rw.json(run.args)], ["result", run.result === null ? "" : rw.json(run.result)]];
    document.getElementById("run-fields").replaceChildren(...rows.flatMap(([k, v]) =>
      [rw.el("dt", {}, k), rw.el("dd", {dataset: {field: k}}, v)]));
  }

  // Each attempt a bar from its start to its end (or now), on one time axis from the
  // submission to the last end; each journaled step a mark at the time it was recorded.
  function timeline(run, attempts, steps) {
    const now = Date.now() / 1000;
    const start = run.created_at;
    const end = Math.max(start + 0.001, run.finished_at || now, ...attempts.map(a => a.ended_at || now));
    const at = t => `${(100 * (t - start) / (end - start)).toFixed(2)}%`;
    const rows = attempts.map(a => {
      const outcome = a.outcome || "running";
      const bar = rw.el("div", {className: `bar ${outcome}`, title: `${outcome} ${rw.duration((a.ended_at || now) - a.started_at)}`});
      bar.style.left = at(a.started_at);
      bar.style.width = `${Math.max(0.3, 100 * ((a.ended_at || now) - a.started_at) / (end - start)).toFixed(2)}%`;
      const marks = steps.filter(s => s.fence === a.fence).map(s => {
        const mark = rw.el("div", {className: "mark", title: `${s.name} (${s.status}) at ${rw.time(s.recorded_at)}`});
        mark.style.left = at(s.recorded_at);
        return mark;
      });
      const label = `attempt ${a.attempt} (fence ${a.fence}) worker ${a.worker ?? "?"} · ${outcome} · ` +
                    rw.duration((a.ended_at || now) - a.started_at) + (a.ended_at ? "" : " so far");
      return rw.el("div", {className: "attempt", dataset: {attempt: a.attempt, fence: a.fence, outcome}},
                   rw.el("span", {title: label}, label), rw.el("div", {className: "track"}, bar, ...marks));
    });
    const waited = attempts.length ? `first started ${rw.duration(Math.max(0, attempts[0].started_at - run.created_at))} after its submission` : "not started yet";
    document.getElementById("run-timeline").replaceChildren(
      ...(rows.length ? rows : [rw.el("p", {className: "hint"}, "no attempt yet")]),
      rw.el("p", {className: "hint"}, `from ${rw.time(start)} to ${rw.time(end)}; ${waited}`));
  }

  // -- the steps on the run's time axis -------------------------------------------------
  // A row per journal entry: a bar from when it began (the entry before it in the same
  // claim, or the claim's start: the journal records ends only) to when it was recorded.
  // Above them, the claims: each a segment coloured by how it ended, and where a new claim
  // began a line across every row, flagged: a retry (the attempt before failed), a
  // takeover (the worker before was lost; the run was recovered), a resume (after a park).
  const BOUNDARY = {retrying: ["retry", "retry"], "taken over": ["takeover", "takeover: recovered"],
                    parked: ["resume", "resumed"], "given back": ["resume", "released, claimed again"]};

  function gantt(run, attempts, steps) {
    const box = document.getElementById("run-gantt");
    if (!steps.length && attempts.length < 2) { box.replaceChildren(); box.hidden = true; return; }
    box.hidden = false;
    const now = Date.now() / 1000;
    const start = run.created_at;
    const end = Math.max(start + 0.001, run.finished_at || now, ...attempts.map(a => a.ended_at || now),
                         ...steps.map(s => s.recorded_at));
    const pct = t => Math.min(100, Math.max(0, 100 * (t - start) / (end - start)));
    const at = (node, from, to) => {
      node.style.left = `${pct(from).toFixed(3)}%`;
      if (to !== undefined) node.style.width = `${Math.max(0, pct(to) - pct(from)).toFixed(3)}%`;
      return node;
    };
    // Where each claim after the first began, and why.
    const boundaries = attempts.slice(1).map((a, i) => {
      const before = attempts[i];
      const [kind, label] = BOUNDARY[before.outcome] || ["claim", "claimed again"];
      return {kind, label: `${label} → attempt ${a.attempt}`, at: a.started_at, attempt: a.attempt, fence: a.fence};
    });
    const lines = () => boundaries.map(b => at(rw.el("div", {className: `g-line ${b.kind}`}), b.at));
    const row = (label, lane, props = {}) => rw.el("div", {className: "g-row", ...props},
      rw.el("div", {className: "g-label", title: label.title || ""}, ...label.nodes), lane);

    const claims = rw.el("div", {className: "g-lane"}, ...lines(),
      ...attempts.map(a => at(rw.el("div", {className: `g-seg ${(a.outcome || "running").replace(" ", "-")}`,
                                            title: `attempt ${a.attempt} (fence ${a.fence}): ${a.outcome || "running"}`}),
                             a.started_at, a.ended_at || now)),
      ...boundaries.map(b => {
        const flag = at(rw.el("span", {className: `g-flag ${b.kind}`, title: `${b.label} at ${rw.time(b.at)}`,
                                       dataset: {kind: b.kind, attempt: b.attempt, fence: b.fence}}, b.label), b.at);
        if (pct(b.at) > 70) flag.classList.add("flip");  // near the right edge: written leftwards
        return flag;
      }));
    const rows = [row({nodes: ["claims"]}, claims, {dataset: {kind: "claims"}})];
    const previous = {};  // fence -> the time its last entry was recorded
    for (const s of steps) {
      const claim = attempts.find(a => a.fence === s.fence);
      let from = previous[s.fence] ?? (claim ? claim.started_at : s.recorded_at);
      // A model call recorded how long it took: its bar is that long (not the time since
      // the entry before it, which may hold the loading of a model's client, a quota's wait).
      const latency = s.name === "model" && s.result && typeof s.result.latency_s === "number" ? s.result.latency_s : null;
      if (latency !== null) from = Math.max(from, s.recorded_at - latency);
      previous[s.fence] = s.recorded_at;
      const kind = s.child_id ? "child" : s.name.startsWith("sleep") || s.name.startsWith("wait") ? "wait" : s.status;
      const took = Math.max(0, s.recorded_at - from);
      const bar = at(rw.el("div", {className: `g-bar ${kind}`,
                                   title: `${s.name}: ${s.status}, about ${rw.duration(took)}, recorded ${rw.time(s.recorded_at)} ` +
                                          `(attempt ${claim ? claim.attempt : "?"}, fence ${s.fence})`}),
                     Math.min(from, s.recorded_at), s.recorded_at);
      rows.push(row({nodes: [rw.el("span", {className: "pos"}, `#${s.position}`), s.name], title: s.name},
                    rw.el("div", {className: "g-lane"}, ...lines(), bar),
                    {className: "g-row step", dataset: {position: s.position, name: s.name, fence: s.fence, status: s.status,
                                                        attempt: claim ? claim.attempt : ""}}));
    }
    const span = end - start;
    box.replaceChildren(...rows,
      row({nodes: [""]}, rw.el("div", {className: "g-axis"}, rw.el("span", {}, "+0 s"),
                               rw.el("span", {}, `+${rw.duration(span / 2)}`), rw.el("span", {}, `+${rw.duration(span)}`))),
      rw.el("div", {className: "legend"},
        ...[["#3fae62", "step done"], ["#e05d63", "failed"], ["#f0c341", "in flight"], ["#7b4fc9", "child run"],
            ["#c0262d", "- - retry"], ["#d97706", "- - takeover"]].map(([color, text]) =>
          rw.el("span", {}, rw.el("i", {style: `background:${color}`}), text)),
        rw.el("span", {className: "axis-note"}, "axis: from the submission at ", rw.el("span", {className: "nowrap"}, rw.iso(start)))));
  }

  // -- an agent run's conversation ------------------------------------------------------
  let thread = null;  // {key, name, calls, complete, read}: the thread's totals, read now and then
  function conversation(run, attempts, steps) {
    const section = document.getElementById("run-conversation");
    if (!rw.conversation.isAgentRun(steps)) { section.hidden = true; return; }
    section.hidden = false;
    const open = [...document.querySelectorAll("#conv-cards details")].map(d => d.open);
    document.getElementById("conv-cards").replaceChildren(...rw.conversation.runCards(run, steps, attempts));
    document.querySelectorAll("#conv-cards details").forEach((d, i) => { d.open = open[i] || false; });
    showTotals(run, steps);
    if (!run.thread) return;
    // The thread's totals: read again once the run's log has moved on, at most every 5 s.
    const key = `${run.id}:${run.thread}`;
    if (thread === null || thread.key !== key) thread = {key, name: run.thread, calls: null, complete: true, read: 0, seq: -1};
    if (thread.seq === run.last_seq || Date.now() - thread.read < 5000) return;
    const mine = thread;
    mine.read = Date.now(); mine.seq = run.last_seq;
    rw.conversation.threadCalls(run.thread, rw.operator() ? run.tenant : null).then(found => {
      if (thread !== mine) return;
      mine.calls = found.calls; mine.complete = found.complete;
      showTotals(run, steps);
    }).catch(error => rw.flash(error.message));
  }
  function showTotals(run, steps) {
    document.getElementById("conv-totals").replaceChildren(...rw.conversation.totals(steps, run.thread ? thread : null));
  }

  // -- parent and children as a tree ----------------------------------------------------
  // Up to MAX_UP ancestors, the parent's other children (this run's siblings), this run,
  // and its children; each node its id, task, state and time taken.
  const MAX_UP = 5;
  let family = null;  // {id, ancestors, siblings}: read once per run shown
  async function tree(run, children) {
    const box = document.getElementById("run-tree");
    if (family === null || family.id !== run.id) {
      const mine = family = {id: run.id, ancestors: [], siblings: null};
      let parent = run.parent_id;
      try {
        while (parent && mine.ancestors.length < MAX_UP) {
          const found = await rw.api(`/runs/${parent}`);
          mine.ancestors.unshift(found);
          parent = found.parent_id;
        }
        if (run.parent_id) mine.siblings = (await rw.api(`/runs/${run.parent_id}/children`)).items;
      } catch (error) { if (error.status !== 404) throw error; }
      mine.more = Boolean(parent);
      if (family !== mine) return;
    }
    const node = (r, self) => rw.el("li", {className: self ? "self" : "", dataset: {id: r.id}},
      rw.el("span", {className: "node"}, self ? rw.el("span", {}, `#${r.id}`) : rw.link(`#/runs/${r.id}`, `#${r.id}`),
            rw.el("span", {}, r.task), rw.state(r.state), rw.el("span", {className: "hint"}, rw.took(r))));
    const self = node(run, true);
    if (children.length) self.append(rw.el("ul", {}, ...children.map(c => node(c, false))));
    let level = self;
    if (family.ancestors.length) {
      const siblings = (family.siblings || [run]).map(r => r.id === run.id ? self : node(r, false));
      if (!siblings.includes(self)) siblings.push(self);
      level = rw.el("ul", {}, ...siblings);
      for (let i = family.ancestors.length - 1; i >= 0; i -= 1) {
        const up = node(family.ancestors[i], false);
        up.append(level);
        level = i === 0 ? up : rw.el("ul", {}, up);
      }
    }
    const top = rw.el("ul", {}, level);
    const hint = !run.parent_id && !children.length
      ? [rw.el("p", {className: "hint"}, ...rw.rich("No parent, no children: a run that calls `ctx.submit(...)` starts children, shown here under it."))]
      : family.more ? [rw.el("p", {className: "hint"}, `(more ancestors above #${family.ancestors[0].id})`)] : [];
    box.replaceChildren(top, ...hint);
  }

  // The log over SSE, from its start; the server answers 204 once the run's log is
  // complete (and the follower stops).
  async function follow(id) {
    if (following) following.abort();
    const control = following = new AbortController();
    const note = document.getElementById("run-follow");
    note.textContent = "(following live)";
    followEnded = false;
    try {
      await rw.follow(`/runs/${id}/events/stream`, lastSeq, control.signal, show);
    } catch (error) {
      if (!control.signal.aborted) { note.textContent = ""; rw.flash(error.message); }
      return;
    }
    if (!control.signal.aborted) {
      followEnded = true;
      note.textContent = "(the run has ended: its log is complete)";
    }
  }

  function show(event) {
    if (event.seq <= lastSeq) return;  // a resumed stream never shows an event twice
    lastSeq = event.seq;
    const line = JSON.stringify(event.data);  // short payloads on the line, long ones indented
    const data = line === "{}" ? "" : line.length <= 120 ? ` ${line}` : `\n${rw.json(event.data)}`;
    document.getElementById("events").append(rw.el("div", {className: "event", dataset: {seq: event.seq, kind: event.kind}},
      `${event.seq} `, rw.el("span", {className: "kind"}, event.kind), " ", rw.el("span", {className: "nowrap"}, rw.time(event.at)),
      data));
    clearTimeout(reloading);  // the page's record follows the log, once a burst is over
    reloading = setTimeout(() => load().catch(error => rw.flash(error.message)), 300);
  }

  // Kept live while only the newest page is shown (paging older stops it).
  const refreshRuns = () => document.querySelectorAll("#runs tbody tr").length <= 50 ? listRuns(null) : Promise.resolve();
  rw.views.runs = {show: showRuns, refresh: refreshRuns};
  rw.views.run = {show: showRun, leave: () => {
    if (following) following.abort();
    following = null; runId = null; family = null; thread = null;
  }};
})();
