"use strict";
// An agent run shown as a conversation: its messages, tool calls and their results as
// cards, each model call with its model, tokens, cost and latency, and totals for the run
// and for its thread. All of it is read from what the run journaled (GET /runs/{id}/steps:
// a `model` step holds the reply, its usage, cost and latency; a `tool:NAME` step the
// result the model got; `thread:history` the thread's messages the run started from) and
// the thread's log (its `model` events), never from the model's provider.
(() => {
  const money = usd => usd == null ? "" : usd === 0 ? "$0" : usd < 0.01 ? `$${usd.toFixed(6)}` : `$${usd.toFixed(4)}`;
  const count = n => Number(n || 0).toLocaleString("en-US");
  const text = value => typeof value === "string" ? value : JSON.stringify(value, null, 2);
  // A JSON text (a tool's arguments, a tool's result) shown indented when it parses.
  const pretty = raw => {
    if (typeof raw !== "string") return JSON.stringify(raw, null, 2);
    try { return JSON.stringify(JSON.parse(raw), null, 2); } catch { return raw; }
  };
  const json = raw => rw.el("pre", {className: "json"}, pretty(raw));

  function card(kind, head, body, props = {}) {
    return rw.el("div", {className: `card ${kind}`, ...props}, rw.el("div", {className: "card-head"}, ...head), ...body);
  }

  // One model call's line: the model, its tokens in and out, its cost and its latency.
  function callMeta(reply, latency) {
    const usage = reply.usage || {};
    const parts = [reply.model || "model", `${count(usage.prompt_tokens)} in / ${count(usage.completion_tokens)} out tokens`,
                   reply.priced === false ? "unpriced" : money(reply.cost_usd)];
    if (latency != null) parts.push(rw.duration(latency));
    return rw.el("span", {className: "meta"}, parts.join(" · "));
  }

  function toolCalls(message) {
    return (message.tool_calls || []).map(call => {
      const fn = call.function || {};
      return card("tool-call", [rw.el("span", {className: "call-name"}, `calls ${fn.name || "?"}`),
                                rw.el("code", {}, call.id || "")],
                  [json(fn.arguments || "{}")], {dataset: {tool: fn.name || "", call: call.id || ""}});
    });
  }

  // A message of a thread's history (no usage recorded with it).
  function messageCard(m, extra = {}) {
    const role = m.role || "?";
    if (role === "tool") {
      return card("message msg-tool tool-result", [rw.el("span", {className: "role"}, "tool"),
                                                   rw.el("code", {}, m.tool_call_id || "")],
                  [json(m.content ?? "")], {dataset: {tool: extra.tool || ""}});
    }
    const body = [];
    if (m.content != null && m.content !== "") body.push(rw.el("div", {className: "card-body"}, text(m.content)));
    body.push(...toolCalls(m));
    if (!body.length && !m.tool_calls) body.push(rw.el("div", {className: "card-body"}, text(m.content ?? m)));
    return card(`message msg-${role}`, [rw.el("span", {className: "role"}, role), ...(extra.head || [])], body,
                {dataset: {role}});
  }

  // The cards of a thread's history, as GET /threads/{t}/messages gives it: each tool
  // result names the tool its call named.
  function messageCards(messages) {
    const names = {};
    return messages.map(m => {
      for (const call of m.tool_calls || []) names[call.id] = (call.function || {}).name;
      return messageCard(m, {tool: m.role === "tool" ? names[m.tool_call_id] : undefined});
    });
  }

  // Model calls: the run's journaled replies, in order. Empty for a run of no agent.
  const modelSteps = steps => steps.filter(s => s.name === "model" && s.result && typeof s.result === "object"
                                                && s.result.message);

  // Each model call's latency: recorded with its reply (runs since it was), else the time
  // from the journal entry before it (or its claim's start) to its own: an upper bound.
  function latencyOf(step, steps, attempts) {
    if (typeof step.result.latency_s === "number") return step.result.latency_s;
    const before = steps.filter(s => s.position < step.position && s.fence === step.fence).pop();
    const claim = attempts.find(a => a.fence === step.fence);
    const from = before ? before.recorded_at : claim ? claim.started_at : null;
    return from == null ? null : Math.max(0, step.recorded_at - from);
  }

  function sum(calls) {
    const out = {calls: 0, input: 0, output: 0, cost: 0, latency: 0, unpriced: 0};
    for (const c of calls) {
      out.calls += 1;
      out.input += (c.usage || {}).prompt_tokens || 0;
      out.output += (c.usage || {}).completion_tokens || 0;
      out.cost += c.cost_usd || 0;
      out.latency += c.latency_s || 0;
      if (c.priced === false) out.unpriced += 1;
    }
    return out;
  }

  function total(scope, label, t, note) {
    return rw.el("div", {className: "total", dataset: {scope, calls: t.calls, tokens: t.input + t.output,
                                                       input: t.input, output: t.output, cost: t.cost.toFixed(8)}},
      rw.el("b", {}, label),
      rw.el("span", {}, `${t.calls} model call${t.calls === 1 ? "" : "s"}`),
      rw.el("span", {}, `${count(t.input)} in / ${count(t.output)} out tokens`),
      rw.el("span", {}, money(t.cost) + (t.unpriced ? ` (+${t.unpriced} unpriced)` : "")),
      rw.el("span", {}, `model time ${rw.duration(t.latency)}`),
      ...(note ? [rw.el("span", {className: "hint"}, note)] : []));
  }

  // The run's cards: the thread's earlier messages (folded), the input, then each journal
  // entry in order: a model call (its reply and tool calls), a tool's result, any other entry.
  function runCards(run, steps, attempts) {
    const cards = [];
    const history = steps.find(s => s.name === "thread:history" && Array.isArray(s.result));
    if (history && history.result.length) {
      const fold = rw.el("details", {}, rw.el("summary", {},
        `${history.result.length} earlier message${history.result.length === 1 ? "" : "s"} of thread ${run.thread}`),
        rw.el("div", {className: "conversation"}, ...messageCards(history.result)));
      cards.push(card("history journal", [], [fold], {dataset: {messages: history.result.length}}));
    }
    const input = run.args ? run.args.input : undefined;
    if (input !== undefined) cards.push(messageCard({role: "user", content: input}));
    const pending = [];  // tool calls not yet answered, in the order the model made them
    const models = modelSteps(steps);
    const last = models[models.length - 1];
    for (const s of steps) {
      if (s.name === "thread:history") continue;
      if (s.name === "model" && models.includes(s)) {
        const reply = s.result, message = reply.message, latency = latencyOf(s, steps, attempts);
        const c = messageCard(message, {head: [callMeta(reply, latency)]});
        c.dataset.position = s.position;
        c.dataset.model = reply.model || "";
        c.dataset.tokens = ((reply.usage || {}).prompt_tokens || 0) + ((reply.usage || {}).completion_tokens || 0);
        if (s === last && !(message.tool_calls || []).length && run.state === "succeeded") c.classList.add("final");
        cards.push(c);
        pending.push(...(message.tool_calls || []));
      } else if (s.name.startsWith("tool:")) {
        const name = s.name.slice(5);
        const at = pending.findIndex(c => (c.function || {}).name === name);
        const call = at >= 0 ? pending.splice(at, 1)[0] : null;
        const failed = s.status !== "done";
        const shown = s.status === "started" ? "in flight: its outcome is not recorded yet"
                    : s.error ? `${s.error.type}: ${s.error.message}` : s.result;
        cards.push(card(`tool-result${failed ? " failed" : ""}`,
          [rw.el("span", {className: "role"}, "tool"), rw.el("span", {className: "call-name"}, `${name} returned`),
           ...(call ? [rw.el("code", {}, call.id)] : []), rw.el("span", {className: "meta"}, rw.time(s.recorded_at))],
          [json(shown ?? "")], {dataset: {tool: name, position: s.position}}));
      } else {
        cards.push(card("journal", [rw.el("span", {className: "role"}, s.name),
                                    rw.el("span", {className: "meta"}, `${s.status} · ${rw.time(s.recorded_at)}`)],
                        s.result === null || s.result === undefined ? [] : [json(s.result)],
                        {dataset: {step: s.name, position: s.position}}));
      }
    }
    if (["queued", "running"].includes(run.state)) {
      cards.push(rw.el("p", {className: "hint"}, pending.length ? "calling its tools…" : "waiting for the model…"));
    }
    return cards;
  }

  // The thread's totals: the `model` events of its whole log (every run's), read a page at
  // a time (at most MAX_PAGES: a longer log's totals say "at least").
  const MAX_PAGES = 20;
  async function threadCalls(thread, tenant) {
    const base = `/threads/${encodeURIComponent(thread)}/events`;
    const calls = [];
    let after = 0, complete = false, incarnation = null;
    for (let page = 0; page < MAX_PAGES; page += 1) {
      const q = new URLSearchParams({after: String(after)});
      if (tenant) q.set("tenant", tenant);
      if (incarnation !== null) q.set("incarnation", String(incarnation));  // the same thread, page after page
      const found = await rw.api(`${base}?${q}`);
      incarnation = found.incarnation;
      for (const e of found.items) if (e.kind === "model") calls.push(e.data);
      if (!found.items.length || found.next_after === after) { complete = true; break; }
      after = found.next_after;
    }
    return {calls, complete};
  }

  rw.conversation = {
    isAgentRun: steps => modelSteps(steps).length > 0,
    runCards,
    messageCards,
    // The run's totals (from its journal) and, for a run of a thread, the thread's.
    totals(steps, thread) {
      const calls = modelSteps(steps).map(s => ({...s.result, latency_s: s.result.latency_s ?? null}));
      const out = [total("run", "This run", sum(calls))];
      if (thread) {
        out.push(thread.calls === null ? rw.el("div", {className: "total hint", dataset: {scope: "thread"}}, "thread: reading…")
                                       : total("thread", `Thread ${thread.name}`, sum(thread.calls),
                                               thread.complete ? "" : "(at least: a long log)"));
      }
      return out;
    },
    totalOf: (scope, label, calls) => total(scope, label, sum(calls)),
    threadCalls,
  };
})();
