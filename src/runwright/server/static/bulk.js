"use strict";
// Bulk actions over a list's filter (POST /bulk): retry, cancel, resume, or fork each run
// from its failing step. A dry run comes first and counts and samples what matches; only
// then may the operator confirm, and the page shows the report: what was done, and each
// refusal with why. The request carries the page's session, so a tenant acts on its own
// runs alone (the server scopes it by the caller, as it does the list).
(() => {
  const LABELS = {retry: "Retry", cancel: "Cancel", resume: "Resume", fork: "Fork from the failing step"};
  const DEFAULTS = {retry: "dead and failed runs", fork: "dead and failed runs", cancel: "queued and running runs",
                    resume: "paused runs"};
  const SHOWN = 200;  // refusals (and done ids) listed; the rest counted
  const plural = (n, one, many) => `${n} ${n === 1 ? one : many}`;
  const failed = p => Object.assign(new Error(`${p.status} ${p.title}: ${p.detail}`), {status: p.status});

  // POST /bulk, its progress streamed (`Accept: application/x-ndjson`): a line after each
  // page of runs to `onProgress`, then the report, which this resolves to. A problem
  // before the stream is the answer's own (a 4xx); one part-way is the stream's last line.
  async function post(body, onProgress) {
    const response = await fetch("/bulk", {method: "POST", credentials: "same-origin", body: JSON.stringify(body),
      headers: {"X-Requested-With": "runwright", "Content-Type": "application/json", "Accept": "application/x-ndjson"}});
    if (response.status === 401) rw.signedOut();
    if (!response.ok) {
      let problem = {status: response.status, title: response.statusText, detail: "no details"};
      try { problem = await response.json(); } catch { /* not JSON */ }
      throw failed(problem);
    }
    if (!(response.headers.get("content-type") || "").includes("ndjson")) return response.json();  // no progress
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const {value, done} = await reader.read();
      buffer += value || "";
      let cut;
      while ((cut = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, cut).trim();
        buffer = buffer.slice(cut + 1);
        if (!line) continue;
        const item = JSON.parse(line);
        if (item.report) return item.report;
        if (item.problem) throw failed(item.problem);
        onProgress(item);
      }
      if (done) throw new Error("the answer ended before its report: dry run again to see what is left");
    }
  }

  // Wire a bulk panel into `box` (an element of the page, empty). `options.actions`: the
  // actions offered; `options.filter()`: {body, text, blocked} for the list shown now, the
  // body's fields those of POST /bulk; `blocked`, a reason no bulk action takes this filter.
  // Returns {reset}: the list's filter changed, so the last dry run no longer holds.
  rw.bulk = (box, options) => {
    const action = rw.el("select", {name: "action"},
      ...options.actions.map(a => rw.el("option", {value: a}, LABELS[a])));
    const limit = rw.el("input", {name: "limit", type: "number", min: 1, max: 100000, value: 1000, required: true,
                                  title: "At most this many runs, newest first"});
    const check = rw.el("button", {type: "submit", className: "bulk-check"}, "Dry run");
    const confirm = rw.el("button", {type: "button", className: "bulk-confirm", disabled: true}, "Confirm");
    const scope = rw.el("p", {className: "hint bulk-scope"});
    const status = rw.el("p", {className: "bulk-status", role: "status"});
    const report = rw.el("div", {className: "bulk-report"});
    const form = rw.el("form", {className: "filters bulk-form"},
      rw.el("label", {}, "action", action), rw.el("label", {}, "at most (runs)", limit), check, confirm);
    box.append(scope, form, status, report);

    let checked = null;  // the body of the last dry run, as JSON: what a confirm acts on
    let running = false;
    const body = () => ({...options.filter().body, action: action.value, limit: Number(limit.value)});
    const holds = () => checked !== null && checked === JSON.stringify(body());
    // A filter no bulk action takes (the list's thread, say) is never sent: it would act
    // on more runs than the list shows.
    const blocked = () => Boolean(options.filter().blocked);
    const busy = on => {
      running = on;
      for (const node of [action, limit]) node.disabled = on;
      check.disabled = on || blocked();
      confirm.disabled = on || blocked() || !holds();
      if (!holds()) confirm.textContent = "Confirm";  // says what it does once a dry run counted it
    };
    const say = (text, kind) => { status.textContent = text; status.className = `bulk-status ${kind || ""}`; };
    const describe = () => {
      const {text, blocked} = options.filter();
      const states = options.filter().body.states;
      scope.replaceChildren(...rw.rich(blocked ? blocked
        : `Over ${text}` + (states && states.length ? "." : `; with no state chosen, the ${DEFAULTS[action.value]} among them.`)));
    };
    const reset = () => {
      checked = null;
      describe();
      if (!running) { say(""); busy(false); }
    };
    // A change of action or cap asks for a new dry run: a confirm acts on what was counted.
    for (const node of [action, limit]) node.addEventListener("input", () => {
      describe();
      if (running) return;
      if (checked !== null && !holds()) { checked = null; say("changed: dry run again to see what matches"); }
      busy(false);
    });

    // Waiting for the server: the seconds it has taken so far, each second, and how far
    // it is (after each page of runs).
    let far = "";
    const working = (what, started) => say(`${what}\u2026 ${Math.round((Date.now() - started) / 1000)} s${far}`, "working");
    async function send(dryRun) {
      const asked = JSON.stringify(body());
      const sent = {...body(), dry_run: dryRun};
      const verb = LABELS[sent.action].toLowerCase();
      const started = Date.now();
      const what = dryRun ? "counting" : `working: ${verb}`;
      far = "";
      busy(true);
      report.replaceChildren();
      working(what, started);
      const ticker = setInterval(() => working(what, started), 1000);
      try {
        const answer = await post(sent, p => {
          far = dryRun ? `; ${p.matched} matched so far` : `; ${p.acted} of the ${p.matched} matched so far done or refused`;
          working(what, started);
        });
        if (dryRun && asked !== JSON.stringify(body())) {
          say("the list's filter changed meanwhile: dry run again");  // this count is another filter's
        } else if (dryRun) {
          checked = answer.matched ? asked : null;  // none matched: nothing to confirm
          const sample = answer.sample.length ? ` (sample: ${answer.sample.map(id => `#${id}`).join(", ")})` : "";
          say(`${plural(answer.matched, "run matches", "runs match")}${sample}` +
              (answer.capped ? `; more match than the cap: only the newest ${answer.matched} would be acted on` : ""),
              "matched");
          confirm.textContent = `${LABELS[sent.action]} ${plural(answer.matched, "run", "runs")}`;
          confirm.dataset.matched = answer.matched;
        } else {
          checked = null;
          say("");
          showReport(answer, verb);
          if (options.done) options.done();
        }
      } catch (error) {
        checked = null;
        say(String(error.message).split("\n")[0], "error");  // the problem's title and detail, one line
      } finally {
        clearInterval(ticker);
        busy(false);
      }
    }

    function showReport(answer, verb) {
      const refused = Object.entries(answer.refused);
      const done = answer.done;
      const summary = rw.el("p", {className: "bulk-summary"},
        `${verb}: ${plural(done.length, "run", "runs")} done, ${refused.length} refused, of ${answer.matched} matched` +
        (answer.capped ? " (more matched than the cap)" : "") + ".");
      const doneList = done.length ? rw.el("p", {className: "bulk-done"}, "done: ",
        ...done.slice(0, SHOWN).flatMap((id, i) => i ? [", ", rw.runLink(id)] : [rw.runLink(id)]),
        done.length > SHOWN ? ` and ${done.length - SHOWN} more` : "") : null;
      const table = rw.el("table", {className: "bulk-refused"},
        rw.el("thead", {}, rw.el("tr", {}, rw.el("th", {}, "refused run"), rw.el("th", {}, "why"))),
        rw.el("tbody", {}, ...refused.slice(0, SHOWN).map(([id, why]) =>
          rw.el("tr", {dataset: {id}}, rw.el("td", {}, rw.runLink(id)), rw.el("td", {className: "wrap"}, why)))));
      report.replaceChildren(...[summary, doneList, refused.length ? rw.el("div", {className: "scroll"}, table) : null,
        refused.length > SHOWN ? rw.el("p", {className: "hint"}, `and ${refused.length - SHOWN} more refused`) : null]
        .filter(node => node !== null));
    }

    form.addEventListener("submit", event => { event.preventDefault(); if (!running && !blocked()) send(true); });
    confirm.addEventListener("click", () => { if (!running && !blocked() && holds()) send(false); });
    reset();
    return {reset};
  };
})();
