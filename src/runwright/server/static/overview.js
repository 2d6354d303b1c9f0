"use strict";
// The overview: the summary's counts, the last hour's charts (uPlot, vendored), and the
// questions runs wait on.
(() => {
  const charts = {};
  const SERIES = {
    throughput: [{label: "ended/min", stroke: "#2463b0", fill: "rgba(36,99,176,.12)"}],
    wait: [{label: "p50", stroke: "#3fae62"}, {label: "p95", stroke: "#f0a441"}, {label: "p99", stroke: "#e05d63"}],
    duration: [{label: "p50", stroke: "#3fae62"}, {label: "p95", stroke: "#f0a441"}, {label: "p99", stroke: "#e05d63"}],
    depth: [{label: "depth", stroke: "#7b4fc9", fill: "rgba(123,79,201,.12)"}],
  };

  // Every chart spans the same last hour, in UTC as the tables are; a bucket with no
  // ended run has no percentile (a gap is bridged, each value drawn as a point).
  let span = [0, 1];
  function chart(name, data) {
    const box = document.getElementById(`chart-${name}`);
    if (!charts[name]) {
      const width = Math.max(300, box.clientWidth || 500);
      charts[name] = new uPlot({
        width, height: 200, tzDate: ts => uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"),
        series: [{}, ...SERIES[name].map(s => ({...s, width: 2, spanGaps: true, points: {show: true, size: 5}}))],
        scales: {x: {time: true, range: () => span}, y: {range: (_u, _min, max) => [0, Math.max(max || 0, name === "depth" || name === "throughput" ? 1 : 1e-3) * 1.1]}},
        axes: [{}, {size: 60}]}, data, box);
    } else {
      charts[name].setData(data);
    }
    // What the chart shows, for a reader (and a test) without pixels: points with a value.
    box.dataset.points = String(data.slice(1).reduce((n, ys) => n + ys.filter(v => v != null).length, 0));
  }

  function tile(label, value) {
    return rw.el("div", {className: "tile", dataset: {name: label}}, rw.el("b", {}, value), rw.el("span", {}, label));
  }

  async function refresh() {
    const [summary, series] = await Promise.all([rw.api("/summary"), rw.api("/metrics/series?window_s=3600&step_s=60")]);
    document.getElementById("tiles").replaceChildren(
      ...["queued", "running", "succeeded", "failed", "dead", "cancelled"].map(k => tile(k, summary[k])),
      tile("workers", summary.workers_alive), tile("oldest due", rw.duration(summary.oldest_due_age_s)),
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
    await showQuestions(await rw.api("/questions"));
  }

  // A question is answered with JSON that fits its schema; an approval with a yes or a no
  // and a reason. Rows being typed into are kept across refreshes.
  async function showQuestions(questions) {
    const body = document.querySelector("#questions tbody");
    const typing = document.activeElement;
    if (typing && typing.tagName === "INPUT" && body.contains(typing) && typing.value) return;
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
