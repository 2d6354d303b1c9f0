"use strict";
// Runs: the filtered list (its filters live in the URL, so a view can be shared), and
// one run's page: attempts on a timeline, steps, children, error, and its log live.
(() => {
  const FILTERS = ["state", "task", "queue", "thread", "tenant", "key", "created_after", "created_before"];
  const TIMES = new Set(["created_after", "created_before"]);
  const form = () => document.getElementById("run-filters");
  // The time filters are UTC, as every time shown is: a datetime-local input holds a
  // wall-clock time with no zone, read here as UTC (not the browser's zone); the API
  // takes epoch seconds.
  const toEpoch = value => String(Date.parse(`${value.length === 16 ? value + ":00" : value}Z`) / 1000);
  const toInput = epoch => new Date(Number(epoch) * 1000).toISOString().slice(0, 19);

  let query = new URLSearchParams();
  async function showRuns(_arg, params) {
    query = params;
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
    const rows = page.items.map(run => ({props: {className: "run", dataset: {id: run.id},
                                                 onclick: () => { location.hash = `#/runs/${run.id}`; }},
      cells: [rw.runLink(run.id), run.task, run.queue,
              run.thread ? rw.link(`#/threads/${encodeURIComponent(run.thread)}` +
                                   (rw.operator() && run.tenant ? `?tenant=${encodeURIComponent(run.tenant)}` : ""), run.thread) : "",
              ...(rw.operator() ? [run.tenant || ""] : []), rw.state(run.state),
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
    document.getElementById("runs-count").textContent = `${document.querySelectorAll("#runs tbody tr").length} shown`;
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
    for (const id of ["events", "run-state", "run-fields", "run-timeline", "run-follow"]) {
      document.getElementById(id).replaceChildren();
    }
    for (const id of ["#run-steps", "#run-children"]) rw.fill(id, []);
    document.getElementById("run-error").hidden = true;
  }

  // Cancel and Retry as `run` allows; both disabled while no run is known (not found,
  // expired, not yet read), so that no click acts on a run the page does not show.
  function actions(run) {
    const cancel = document.getElementById("run-cancel"), retry = document.getElementById("run-retry");
    cancel.disabled = run === null || !["queued", "running"].includes(run.state);
    retry.disabled = run === null || !["dead", "failed"].includes(run.state);
    cancel.onclick = run === null ? null : () => act(`/runs/${run.id}/cancel`);
    retry.onclick = run === null ? null : () => act(`/runs/${run.id}/retry`);
  }

  async function load() {
    const id = runId;
    if (id === null) return;
    let found;
    try {
      found = await Promise.all([rw.api(`/runs/${id}`), rw.api(`/runs/${id}/attempts`),
                                 rw.api(`/runs/${id}/steps`), rw.api(`/runs/${id}/children`)]);
    } catch (error) {
      if (id === runId) actions(null);
      throw error;
    }
    const [run, attempts, steps, children] = found;
    if (id !== runId) return;
    document.getElementById("run-state").replaceChildren(rw.state(run.state));
    actions(run);
    fields(run);
    const error = document.getElementById("run-error");
    error.hidden = !run.error;
    if (run.error) {
      error.querySelector("pre").textContent = `${run.error.type}: ${run.error.message}\n\n${run.error.traceback || "(no traceback recorded)"}`;
    }
    timeline(run, attempts, steps);
    let previous = attempts.length ? attempts[0].started_at : run.created_at;
    rw.fill("#run-steps", steps.map(s => {
      const since = s.recorded_at - previous; previous = s.recorded_at;
      const shown = s.error ? `${s.error.type}: ${s.error.message}` : JSON.stringify(s.result);
      return {props: {dataset: {position: s.position}},
              cells: [s.position, s.name, rw.state(s.status === "done" ? "succeeded" : s.status),
                      `${attemptOf(attempts, s.fence)} (${s.fence})`, rw.time(s.recorded_at),
                      rw.duration(Math.max(0, since)),
                      s.child_id ? rw.el("span", {}, "child ", rw.runLink(s.child_id)) : (shown || "").slice(0, 200)]};
    }));
    rw.fill("#run-children", children.items.map(c => ({props: {dataset: {id: c.id}},
      cells: [rw.runLink(c.id), c.task, rw.state(c.state), rw.took(c)]})));
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

  function fields(run) {
    const rows = [["task", run.task], ["queue", `${run.queue} (priority ${run.priority})`], ["key", run.key],
      ["tenant", run.tenant || "(none)"],
      ["thread", run.thread ? rw.link(`#/threads/${encodeURIComponent(run.thread)}` +
                                      (run.tenant && rw.operator() ? `?tenant=${encodeURIComponent(run.tenant)}` : ""), run.thread) : ""],
      ["parent", run.parent_id ? rw.runLink(run.parent_id) : "(none)"],
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
                   rw.el("span", {}, label), rw.el("div", {className: "track"}, bar, ...marks));
    });
    const waited = attempts.length ? `first started ${rw.duration(Math.max(0, attempts[0].started_at - run.created_at))} after its submission` : "not started yet";
    document.getElementById("run-timeline").replaceChildren(
      ...(rows.length ? rows : [rw.el("p", {className: "hint"}, "no attempt yet")]),
      rw.el("p", {className: "hint"}, `from ${rw.time(start)} to ${rw.time(end)}; ${waited}`));
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
      `${event.seq} `, rw.el("span", {className: "kind"}, event.kind), ` ${rw.time(event.at)}`, data));
    clearTimeout(reloading);  // the page's record follows the log, once a burst is over
    reloading = setTimeout(() => load().catch(error => rw.flash(error.message)), 300);
  }

  // Kept live while only the newest page is shown (paging older stops it).
  const refreshRuns = () => document.querySelectorAll("#runs tbody tr").length <= 50 ? listRuns(null) : Promise.resolve();
  rw.views.runs = {show: showRuns, refresh: refreshRuns};
  rw.views.run = {show: showRun, leave: () => { if (following) following.abort(); following = null; runId = null; }};
})();
