// What the inspector derives from the committed view: the transcript rows, the event
// history and the usage per run. Entry kinds the inspector does not know (structured
// events a newer harness writes) are shown generically: their kind and their data.

const CONVERSATION_KINDS = new Set(["user", "assistant", "tool_result"]);

function textOf(message) {
  if (!message) return "";
  if (typeof message.content === "string") return message.content;
  return (message.content || [])
    .filter((b) => b.type === "text")
    .map((b) => b.text)
    .join("");
}

export function toolCalls(message) {
  return ((message && message.content) || []).filter((b) => b.type === "tool_call");
}

// One row per entry: {id, kind, role, text, calls, time, error, usage, data}.
export function transcriptRows(view) {
  const rows = [];
  for (const entry of (view && view.entries) || []) {
    const message = entry.message || null;
    rows.push({
      id: entry.id,
      kind: entry.kind,
      role: message ? message.role : entry.kind,
      text: textOf(message),
      calls: message && message.role === "assistant" ? toolCalls(message) : [],
      tool: message && message.role === "tool_result" ? message.tool_name : null,
      isError: Boolean(message && message.is_error),
      stop: message && message.stop_reason,
      usage: message && message.usage,
      time: entry.created_at,
      data: entry.data,
      other: !CONVERSATION_KINDS.has(entry.kind),
    });
  }
  return rows;
}

// The streaming answer not yet committed as an entry (live.generation.partial).
export function partialOf(view) {
  const live = view && view.docs && view.docs.live;
  const generation = live && live.generation;
  return generation && generation.partial ? generation.partial : null;
}

// The tools running now, with their output so far (live.tools: call id -> slot).
export function liveTools(view) {
  const live = view && view.docs && view.docs.live;
  const tools = (live && live.tools) || {};
  return Object.entries(tools)
    .filter(([, slot]) => slot && typeof slot.output === "string" && slot.output !== "")
    .map(([callId, slot]) => ({ callId, name: slot.name || "tool", status: slot.status, output: slot.output }));
}

export function retryOf(view) {
  const live = view && view.docs && view.docs.live;
  return live && live.generation && live.generation.retry ? live.generation.retry : null;
}

// The event history, oldest first: crashes recovered, tool replays, retries, aborts,
// compactions (the harness's events document), model errors and tool diagnostics (from
// the entries), and any entry of a kind the harness adds for events. Each: {key, time,
// kind, text}. An abort is told once, by the harness's abort event (its answer's entry
// only shows the "aborted" badge in the transcript).
export function eventsOf(view, resumed) {
  const out = [];
  for (const entry of (view && view.entries) || []) {
    const message = entry.message || {};
    const data = entry.data || {};
    if (!CONVERSATION_KINDS.has(entry.kind)) {
      const detail = entry.message ? textOf(entry.message) : JSON.stringify(data);
      out.push({ key: `e${entry.id}`, time: entry.created_at, kind: entry.kind, text: detail });
      continue;
    }
    if (entry.kind === "assistant" && message.stop_reason === "error") {
      out.push({ key: `e${entry.id}`, time: entry.created_at, kind: "model error", text: message.error || textOf(message) });
    }
    if (entry.kind === "tool_result") {
      for (const d of data.diagnostics || []) {
        const code = d.code || d.kind || "diagnostic";
        out.push({
          key: `e${entry.id}-${code}`,
          time: entry.created_at,
          kind: `tool ${code}`,
          text: `${message.tool_name || ""}: ${d.message || ""}`,
        });
      }
    }
  }
  const docs = (view && view.docs) || {};
  const told = Object.values((docs.events && docs.events.items) || []).filter((e) => e.kind === "retry");
  const retry = retryOf(view);
  // The live retry is told by the harness's retry event too, once it is committed.
  if (retry && !told.some((e) => e.attempt === retry.attempt)) {
    out.push({
      key: `retry-${retry.attempt}`,
      time: retry.at,
      kind: "model retry",
      text: `attempt ${retry.attempt} due ${new Date(retry.at).toISOString()}: ${retry.error || ""}`,
    });
  }
  for (const event of resumed.values()) out.push(event);
  // Event documents (a harness that keeps an event log as a document): listed as they are.
  for (const [name, doc] of Object.entries((view && view.docs) || {})) {
    if (!/event/i.test(name)) continue;
    const items = Array.isArray(doc) ? doc : (doc && (doc.items || doc.events)) || [];
    items.forEach((item, i) => {
      out.push({
        key: `${name}-${item.n ?? i}`,
        time: item.at || item.time || null,
        kind: item.kind || item.type || name,
        text: describe(item),
      });
    });
  }
  // In time order (stable: events of one commit keep their order); untimed ones last.
  const at = (e) => (typeof e.time === "number" ? e.time : Infinity);
  return out.map((e, i) => [e, i]).sort((x, y) => at(x[0]) - at(y[0]) || x[1] - y[1]).map(([e]) => e);
}

// The usage ledger's compaction counts, in a line (null when there were none).
export function compactionCounts(view) {
  const usage = view && view.docs && view.docs.usage;
  const counts = usage && usage.compactions;
  if (!counts || typeof counts !== "object") return null;
  const parts = Object.entries(counts).filter(([, v]) => typeof v === "number").map(([k, v]) => `${v} ${k}`);
  return parts.length ? `compactions: ${parts.join(", ")}` : null;
}

// Usage per run: a run starts at a user entry and sums the assistant entries after it.
export function usagePerRun(view) {
  const runs = [];
  let current = null;
  for (const entry of (view && view.entries) || []) {
    const message = entry.message || {};
    if (entry.kind === "user") {
      current = { input: textOf(message), tokensIn: 0, tokensOut: 0, cost: 0, turns: 0 };
      runs.push(current);
    } else if (entry.kind === "assistant" && current) {
      const u = message.usage || {};
      current.tokensIn += (u.input || 0) + (u.cache_read || 0) + (u.cache_write || 0);
      current.tokensOut += u.output || 0;
      current.cost += u.cost || 0;
      current.turns += 1;
    }
  }
  return runs;
}

// A harness event (core/harness/events.py) in a line; unknown kinds as their JSON.
function describe(item) {
  const { n, kind, at, at_iso, ...rest } = item;
  switch (kind) {
    case "restart":
      return `after a restart, recovering ${(rest.tasks || []).map((t) => t.tool || t.kind).join(", ")}`;
    case "tool_recovery":
      return `${rest.tool}: ${rest.how}${rest.op ? ` (op ${rest.op})` : ""}${rest.reason ? ` — ${rest.reason}` : ""}`;
    case "retry":
      return `attempt ${rest.attempt} in ${Math.round((rest.delay_ms || 0) / 100) / 10} s: ${rest.error || ""}`;
    case "compaction":
      return `${rest.state}${rest.reason ? ` (${rest.reason})` : ""}${rest.task ? ` · task ${rest.task}` : ""}`;
    case "abort":
      return describeAbort(rest);
    case "approval":
      return rest.state === "pending"
        ? `${rest.tool} waits for approval${rest.expires_at ? ` (denied at ${new Date(rest.expires_at).toISOString()} if undecided)` : ""}`
        : `${rest.tool}: ${rest.state}${rest.note ? ` — ${rest.note}` : ""}`;
    default:
      return JSON.stringify(rest);
  }
}

// An abort event by its path (scope): what was aborted.
function describeAbort(rest) {
  const what = rest.tool || rest.task_kind || "task";
  switch (rest.scope) {
    case "timer":
      return `reminder ${rest.task} cancelled`;
    case "schedule":
      return `schedule ${rest.task} cancelled`;
    case "submission":
      return rest.withdrawn
        ? `submission ${rest.submission} withdrawn before it started`
        : `submission ${rest.submission} aborted: its run (${what} task ${rest.task})`;
    case "task":
      return `${what} task ${rest.task} aborted`;
    default:
      return `conversation aborted: ${rest.tasks} task(s) marked${rest.background ? ", background too" : ""}`;
  }
}
