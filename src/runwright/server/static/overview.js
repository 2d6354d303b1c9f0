"use strict";
// The overview: the summary's counts, the last hour's charts (uPlot, vendored), and the
// questions runs wait on.
(() => {
  const charts = rw.charts = {};  // by name (a test reads what an axis shows: its ticks are drawn, not in the DOM)
  const SERIES = {
    throughput: [{label: "ended/min", stroke: "#2463b0", fill: "rgba(36,99,176,.12)"}],
    wait: [{label: "p50", stroke: "#3fae62"}, {label: "p95", stroke: "#f0a441"}, {label: "p99", stroke: "#e05d63"}],
    duration: [{label: "p50", stroke: "#3fae62"}, {label: "p95", stroke: "#f0a441"}, {label: "p99", stroke: "#e05d63"}],
    depth: [{label: "depth", stroke: "#7b4fc9", fill: "rgba(123,79,201,.12)"}],
  };

  // Every chart spans the same last hour, in UTC as the tables are: ticks `MM-DD HH:MMZ`,
  // the legend's time in full ISO. A bucket with no ended run has no percentile (a gap is
  // bridged, each value drawn as a point); a chart with no point at all says so instead
  // of drawing an axis of made-up values.
  const EMPTY = {
    throughput: "No runs ended in the last hour.",
    wait: "No runs ended in the last hour, so no submit-to-start times.",
    duration: "No runs ended in the last hour, so no durations.",
    depth: "No queued runs sampled in the last hour.",
  };
  const UNITS = {throughput: "/min", wait: " s", duration: " s", depth: ""};
  const pad = n => String(n).padStart(2, "0");
  const tick = ts => { const d = new Date(ts * 1000); return `${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())} ${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}Z`; };
  // As many decimals as the step between ticks needs, so no two ticks read the same.
  const decimals = splits => {
    const step = splits.length > 1 ? Math.abs(splits[1] - splits[0]) : 1;
    for (let places = 0; places < 6; places += 1) {
      const scaled = step * 10 ** places;
      if (Math.abs(Math.round(scaled) - scaled) < 1e-6 * Math.max(1, scaled)) return places;
    }
    return 6;
  };
  const number = (v, places) => v == null ? "–" : Number(v).toFixed(places);

  let span = [0, 1];
  function chart(name, data) {
    const box = document.getElementById(`chart-${name}`);
    const points = data.slice(1).reduce((n, ys) => n + ys.filter(v => v != null).length, 0);
    // Throughput and depth count (a zero is no run); latencies are null where no run ended.
    const empty = data.slice(1).every(ys => ys.every(v => v == null || v === 0));
    const width = () => Math.max(200, box.clientWidth || 500);
    if (!charts[name]) {
      charts[name] = new uPlot({
        // Room on the right for the last tick's label, which is centred on the axis' end
        // (without it `MM-DD HH:MMZ` was cut to `MM-DD HH:MM`).
        width: width(), height: 200, padding: [null, 44, null, null], tzDate: ts => uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"),
        series: [{label: "time (UTC)", value: (_u, ts) => ts == null ? "–" : rw.iso(ts)},
                 ...SERIES[name].map(s => ({...s, width: 2, spanGaps: true, points: {show: true, size: 5},
                                            value: (_u, v) => v == null ? "–" : `${+Number(v).toPrecision(4)}${UNITS[name]}`}))],
        scales: {x: {time: true, range: () => span},
                 y: {range: (_u, _min, max) => [0, charts[name] && charts[name].empty ? 1 : Math.max(max || 0, name === "depth" || name === "throughput" ? 1 : 1e-3) * 1.1]}},
        axes: [{values: (_u, splits) => splits.map(tick), space: 90},
               {size: 60, values: (_u, splits) => { const places = decimals(splits); return splits.map(v => number(v, places)); }}]},
        data, box);
      new ResizeObserver(() => { const w = width(); if (charts[name].width !== w) charts[name].setSize({width: w, height: 200}); }).observe(box);
    }
    charts[name].empty = empty;
    charts[name].setData(data);
    // What the chart shows, for a reader (and a test) without pixels: points with a value.
    box.dataset.points = String(points);
    box.dataset.empty = String(empty);
    let note = box.querySelector(".chart-empty");
    if (empty && !note) note = box.appendChild(rw.el("div", {className: "chart-empty"}));
    if (note) { note.hidden = !empty; note.textContent = EMPTY[name]; }
  }

  function tile(label, value) {
    return rw.el("div", {className: "tile", dataset: {name: label}}, rw.el("b", {}, value === "" || value == null ? "–" : value),
                 rw.el("span", {}, label));
  }

  async function refresh() {
    const [summary, series] = await Promise.all([rw.api("/summary"), rw.api("/metrics/series?window_s=3600&step_s=60")]);
    document.getElementById("tiles").replaceChildren(
      ...["queued", "running", "succeeded", "failed", "dead", "cancelled"].map(k => tile(k, summary[k])),
      tile("workers", summary.workers_alive), // No due run: nothing has waited, which "0 ms" did not say.
      tile("oldest due", Object.keys(summary.queue_depths || {}).length ? rw.duration(summary.oldest_due_age_s) : "–"),
      tile("throughput/min", summary.throughput_per_min),
      tile("start p95", rw.duration(summary.submit_to_start_s.p95)),
      tile("duration p95", rw.duration(summary.run_duration_s.p95)));
    span = [series.now - series.window_s, series.now];
    chart("throughput", [series.t, series.throughput_per_min]);
    chart("wait", [series.t, series.submit_to_start_s.p50, series.submit_to_start_s.p95, series.submit_to_start_s.p99]);
    chart("duration", [series.t, series.run_duration_s.p50, series.run_duration_s.p95, series.run_duration_s.p99]);
    const depth = series.queue_depth;
    chart("depth", [[...depth.t, series.now], [...depth.depth, depth.now]]);
    const ended = series.ended.reduce((n, v) => n + (v || 0), 0);
    document.getElementById("chart-throughput").dataset.ended = String(ended);
    document.getElementById("chart-depth").dataset.now = String(depth.now);
    document.getElementById("series-note").textContent =
      `Last hour, per minute: ${ended} runs ended` +
      (series.complete_since > series.t[0] ? ` (only since ${rw.time(series.complete_since)}: more ended than the sample holds)` : "") +
      `. Queue depth: sampled by this server every ${depth.sampled_every_s} s since it started; now ${depth.now}.`;
    rw.fill("#queues", Object.entries(depth.by_queue).map(([queue, n]) => ({props: {dataset: {queue}},
      cells: [queue, n, rw.link(`#/runs?state=queued&queue=${encodeURIComponent(queue)}`, "runs")]})));
    // The operator's summary has the keys of concurrency limits and rates in use (a
    // tenant's has not: a key names other tenants); a full key's queued runs wait for it.
    // A rate (per_s set) is full when its window holds its max.
    if (summary.limits) rw.fill("#limits", summary.limits.map(use => {
      const rate = use.per_s !== undefined && use.per_s !== null;
      const full = rate ? use.spent >= use.max : use.running >= use.max;
      return {
        props: {dataset: {limit: use.limit, key: use.key, full: String(full)}},
        cells: [use.limit, use.key, rate ? `${use.running} (${use.spent} started in ${use.per_s} s)` : use.running,
                use.max, use.queued,
                use.queued && full ? rw.link(`#/runs?state=queued&waiting=${rate ? "rate" : "limit"}`, "waiting") : ""]};
    }));
    // The weights the operator set on fair keys (rw.Fair); every other key has weight 1.
    if (summary.weights) rw.fill("#weights", Object.entries(summary.weights).map(([target, weight]) => ({
      props: {dataset: {target}},
      cells: [target.includes(":") ? target : `${target} (every key)`, weight]})));
    await showQuestions(await rw.api("/questions"));
  }

  // A question is answered with JSON that fits its schema; an approval with a yes or a no
  // and a reason. Rows being typed into are kept across refreshes.
  async function showQuestions(questions) {
    const body = document.querySelector("#questions tbody");
    const typing = document.activeElement;
    if (typing && typing.tagName === "INPUT" && body.contains(typing) && typing.value) return;
    rw.empty("#questions", questions.length === 0);
    body.replaceChildren(...questions.map(q => {
      const details = q.kind === "approval" ? `${q.body.tool} ${JSON.stringify(q.body.arguments)}`
                                            : `answer: ${JSON.stringify(q.body.schema || "any JSON")}`;
      const input = rw.el("input");
      const answer = async value => {
        try { await rw.post(`/runs/${q.run_id}/answers`, {question: q.id, value}); refresh(); }
        catch (error) { input.setCustomValidity(String(error.message)); input.reportValidity(); }
      };
      const button = (label, cls, value) => rw.el("button", {className: cls, onclick: () => answer(value())}, label);
      const td = rw.el("td");
      if (q.kind === "approval") {
        input.placeholder = "reason (to deny)";
        td.append(button("approve", "approve", () => ({approved: true})), input,
                  button("deny", "deny", () => ({approved: false, reason: input.value || "denied"})));
      } else {
        input.placeholder = "JSON, e.g. true"; input.className = "answer";
        td.append(input, button("answer", "send", () => { try { return JSON.parse(input.value); } catch { return input.value; } }));
      }
      return rw.el("tr", {dataset: {run: q.run_id, question: q.id}}, rw.el("td", {}, rw.runLink(q.run_id)),
                   rw.el("td", {}, q.body.text), rw.el("td", {className: "args"}, details), td);
    }));
  }

  rw.views.overview = {show: refresh, refresh};
})();
