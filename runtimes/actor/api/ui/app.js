// The perdure web inspector: actors and conversations, the live transcript (the watch),
// the task tree, timers, usage and events of one actor, and the buttons that act on it.
// Everything goes through the public actor API with the bearer token the person gave.

import { Api, ApiError } from "/ui/api.js";
import { approvalItems } from "/ui/approvals.js";
import { applyOps } from "/ui/ops.js";
import { compactionCounts, eventsOf, liveTools, partialOf, transcriptRows, usagePerRun } from "/ui/history.js";
import { elapsed, h, isoTime, money, replaceChildren, short } from "/ui/render.js";
import { describeAnswer, tokenScope } from "/ui/status.js";

const TOKEN_KEY = "perdure.token";
const POLL_MS = 1000;
const RECONNECT_MS = 1000;
const $ = (id) => document.getElementById(id);

const state = {
  api: null,
  scope: null, // a scoped token's {actor, rights, conversation}; null for the host token
  actor: null,
  conversationId: 1,
  view: null,
  tasks: null,
  timers: null,
  approvals: null,
  watchStop: null,
  pollTimer: null,
  renderQueued: false,
  longPoll: false, // the host cannot stream the watch: long-poll its deltas instead
  // Tool tasks seen resumed after a restart (attempt > 1), kept for the event history.
  resumed: new Map(),
};

// ------------------------------------------------------------------ connection

function setConnection(kind, text) {
  const badge = $("connection");
  badge.dataset.state = kind;
  badge.textContent = text;
}

function notice(text, isError = false) {
  const node = $("notice");
  node.textContent = text;
  node.className = isError ? "error" : "";
}

function showLogin(message = "") {
  $("login").hidden = false;
  $("main").hidden = true;
  $("sign-out").hidden = true;
  $("login-error").textContent = message;
  $("scope").textContent = "";
  setConnection("offline", "not connected");
  $("token").focus();
}

async function connect(token) {
  const api = new Api(token);
  const scope = tokenScope(token);
  if (scope) {
    // A token for one actor (perdure token --actor A): it cannot list the host's
    // actors, so the page checks it on that actor and opens it directly.
    const where = scope.conversation ? `conversations/${scope.conversation}/view` : "conversations?limit=1";
    try {
      await api.get(`/v1/actors/${encodeURIComponent(scope.actor)}/${where}`);
    } catch (error) {
      // Not created yet (the first submission creates it): the token was accepted.
      if (!(error instanceof ApiError && error.status === 404)) throw error;
    }
  } else {
    try {
      await api.get("/v1/actors?limit=1");
    } catch (error) {
      // A host without an actor index still accepted the token (auth comes first).
      if (!noListing(error)) throw error;
    }
  }
  state.api = api;
  state.scope = scope;
  sessionStorage.setItem(TOKEN_KEY, token);
  $("login").hidden = true;
  $("main").hidden = false;
  $("sign-out").hidden = false;
  setConnection("online", "connected");
  applyRights();
  if (scope) {
    await selectActor(scope.actor, scope.conversation || 1);
    return;
  }
  await refreshActors();
  const wanted = new URLSearchParams(location.hash.slice(1)).get("actor");
  if (wanted) await selectActor(wanted);
}

// A host that cannot list its actors: 501 not_supported, or no such route at all.
function noListing(error) {
  return error instanceof ApiError && (error.status === 501 || (error.status === 404 && error.code === "no_route"));
}

// A scoped token's rights decide which controls the page offers (the host refuses the
// rest anyway): read only watches; submit adds the composer, abort and reminders;
// compaction is admin's.
function applyRights() {
  const scope = state.scope;
  const rights = scope ? scope.rights : "admin";
  const can = (need) => ["read", "submit", "admin"].indexOf(rights) >= ["read", "submit", "admin"].indexOf(need);
  for (const id of ["input", "submit", "steer", "abort", "reminder-message", "reminder-after", "remind"]) $(id).disabled = !can("submit");
  $("compact").disabled = !can("admin");
  $("open-actor-form").hidden = Boolean(scope);
  $("tasks-note").textContent = "";
  $("scope").textContent = scope
    ? `this token opens actor ${scope.actor}${scope.conversation ? `, conversation ${scope.conversation}` : ""} (${scope.rights})`
    : "";
}

function signOut() {
  sessionStorage.removeItem(TOKEN_KEY);
  stopActor();
  state.api = null;
  state.scope = null;
  showLogin();
}

// ------------------------------------------------------------------ actors and conversations

async function refreshActors() {
  if (state.scope) {
    // One actor is all this token reaches.
    replaceChildren($("actors"), [h("li", { class: "selected" }, h("b", { dataset: { actor: state.scope.actor } }, state.scope.actor))]);
    return;
  }
  let names = [];
  try {
    const page = await state.api.get("/v1/actors?limit=1000");
    names = page.actors.map((a) => a.id);
  } catch (error) {
    if (noListing(error)) {
      replaceChildren($("actors"), [h("li", { class: "muted" }, "this host cannot list actors: open one by id")]);
      return;
    }
    throw error;
  }
  if (state.actor && !names.includes(state.actor)) names.push(state.actor);
  replaceChildren(
    $("actors"),
    names.map((name) =>
      h(
        "li",
        { class: name === state.actor ? "selected" : "" },
        h("button", { type: "button", class: "link", dataset: { actor: name }, onclick: () => selectActor(name) }, name),
      ),
    ),
  );
}

async function refreshConversations() {
  if (state.scope && state.scope.conversation) {
    // A token for one conversation cannot list the others.
    replaceChildren($("conversations"), [h("li", { class: "selected" }, `conversation ${state.scope.conversation}`)]);
    return;
  }
  const page = await state.api.get(`/v1/actors/${state.actor}/conversations?limit=1000`);
  const children = new Map();
  for (const c of page.conversations) {
    const up = (c.parent && c.parent.conversation_id) || (c.owner && c.owner.conversation_id) || 0;
    if (!children.has(up)) children.set(up, []);
    children.get(up).push(c);
  }
  const branch = (up) =>
    (children.get(up) || []).map((c) => {
      const label = c.parent ? `fork of ${c.parent.conversation_id} at entry ${c.parent.at_entry}` : c.owner ? `sub-agent of task ${c.owner.task_id}` : "root";
      return h(
        "li",
        { class: c.id === state.conversationId ? "selected" : "" },
        h("button", { type: "button", class: "link", dataset: { conversation: c.id }, onclick: () => selectConversation(c.id) }, `conversation ${c.id}`),
        h("small", {}, ` ${label}`),
        children.has(c.id) ? h("ul", {}, branch(c.id)) : null,
      );
    });
  replaceChildren($("conversations"), branch(0));
}

async function selectActor(name, conversationId = 1) {
  stopActor();
  state.actor = name;
  state.conversationId = conversationId;
  state.resumed = new Map();
  history.replaceState(null, "", `#actor=${encodeURIComponent(name)}`);
  await refreshActors();
  await selectConversation(conversationId);
  poll();
}

async function selectConversation(id) {
  if (state.watchStop) state.watchStop();
  state.conversationId = id;
  state.view = null;
  $("conversation-title").textContent = `${state.actor} · conversation ${id}`;
  try {
    await refreshConversations();
  } catch (error) {
    notice(`${error.message}`, true);
  }
  startWatch();
  render();
}

function stopActor() {
  if (state.watchStop) state.watchStop();
  state.watchStop = null;
  clearTimeout(state.pollTimer);
  state.pollTimer = null;
}

// ------------------------------------------------------------------ the watch

// The watch: the SSE stream, or, on a host that cannot stream (Lambda answers whole
// responses only), the long poll of the same frames (``deltas``). The page switches to
// the long poll once the stream is refused with a server error, and keeps it.
function startWatch() {
  const controller = new AbortController();
  const base = `/v1/actors/${state.actor}/conversations/${state.conversationId}`;
  let stopped = false;
  state.watchStop = () => {
    stopped = true;
    controller.abort();
  };
  (async () => {
    while (!stopped) {
      try {
        if (state.longPoll) {
          await longPoll(base, controller.signal, () => stopped);
        } else {
          await state.api.watch(`${base}/watch`, onFrame, controller.signal);
        }
        if (!stopped) setConnection("reconnecting", "stream ended: reconnecting");
      } catch (error) {
        if (stopped) return;
        if (error instanceof ApiError && error.status === 401) return signOut();
        if (error instanceof ApiError && error.status >= 500 && !state.longPoll) {
          state.longPoll = true;
          continue;
        }
        if (error instanceof ApiError && error.status === 404) {
          // No such actor (or conversation) yet: the first submission creates it.
          setConnection("online", "connected");
          notice(`${state.actor}: ${error.message} (waiting for it)`);
        } else {
          setConnection("reconnecting", "host unreachable: reconnecting");
        }
      }
      await new Promise((resolve) => setTimeout(resolve, RECONNECT_MS));
    }
  })();
}

async function longPoll(base, signal, stopped) {
  let after = null;
  while (!stopped()) {
    const query = after === null ? "" : `?after=${after}&wait=20`;
    const page = await state.api.request("GET", `${base}/deltas${query}`, undefined, signal);
    for (const frame of page.frames) onFrame(frame);
    if (page.next === null || page.next === undefined) {
      // A host without commit seqs: the whole view each time, once a second.
      await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    }
    after = page.next ?? null;
  }
}

function onFrame(frame) {
  if (frame.type === "view" || frame.type === "replace") {
    state.view = frame.value;
    setConnection("online", "live");
  } else if (frame.type === "delta" && state.view) {
    state.view = applyOps(state.view, frame.ops);
  } else if (frame.type === "end") {
    setConnection("reconnecting", `stream ended (${frame.reason})`);
  }
  queueRender();
}

// ------------------------------------------------------------------ polling: tasks, timers

async function poll() {
  clearTimeout(state.pollTimer);
  if (!state.actor) return;
  const actor = state.actor;
  if (state.scope && state.scope.conversation) {
    // The actor's task graph and timers span every conversation: not this token's.
    state.tasks = null;
    state.timers = null;
    $("tasks-note").textContent = "tasks and timers: not available with a token for one conversation";
    return;
  }
  try {
    const [tasks, timers, approvals] = await Promise.all([
      state.api.get(`/v1/actors/${actor}/tasks`),
      state.api.get(`/v1/actors/${actor}/timers`),
      state.api.get(`/v1/actors/${actor}/approvals`),
    ]);
    if (actor !== state.actor) return;
    state.tasks = tasks;
    state.timers = timers;
    state.approvals = approvals.approvals;
    for (const task of tasks.tasks) {
      if (task.tool && task.attempt > 1 && !state.resumed.has(task.id)) {
        state.resumed.set(task.id, {
          key: `resumed-${task.id}`,
          time: Date.now(),
          kind: "tool resumed",
          text: `${task.tool} (${task.replay}) resumed after a restart: attempt ${task.attempt}`,
        });
      }
    }
    queueRender();
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) return signOut();
    if (!(error instanceof ApiError)) setConnection("reconnecting", "host unreachable: reconnecting");
  } finally {
    if (actor === state.actor) state.pollTimer = setTimeout(poll, POLL_MS);
  }
}

// ------------------------------------------------------------------ rendering

function queueRender() {
  if (state.renderQueued) return;
  state.renderQueued = true;
  requestAnimationFrame(() => {
    state.renderQueued = false;
    render();
  });
}

function render() {
  renderTranscript();
  renderTasks();
  renderTimers();
  const reads = state.scope && state.scope.rights === "read"; // deciding needs submit
  replaceChildren($("approvals"), approvalItems(state.approvals || [], reads ? null : decide));
  renderUsage();
  renderEvents();
}

function usageLine(usage) {
  if (!usage) return null;
  return h("small", { class: "usage" }, `${usage.input || 0} in · ${usage.output || 0} out · ${money(usage.cost)}`);
}

function renderTranscript() {
  const list = $("transcript");
  const rows = transcriptRows(state.view);
  const items = rows.map((row) => {
    const body = [];
    if (row.text) body.push(h("div", { class: "text" }, row.text));
    for (const call of row.calls) {
      body.push(h("div", { class: "call" }, `→ ${call.name}(${short(call.arguments, 200)})`));
    }
    if (row.other) body.push(h("pre", { class: "data" }, short(row.data, 400)));
    if (row.stop === "aborted" || row.stop === "error") body.push(h("span", { class: "badge", "data-state": "error" }, row.stop));
    const label = row.tool ? `tool_result · ${row.tool}` : row.kind;
    return h(
      "li",
      { class: `entry ${row.role}${row.isError ? " error" : ""}`, dataset: { kind: row.kind, entry: row.id } },
      h("header", {}, h("b", {}, label), h("time", {}, isoTime(row.time)), row.kind === "assistant" ? usageLine(row.usage) : null),
      body,
    );
  });
  for (const tool of liveTools(state.view)) {
    // A running tool's output as it is committed (the chat prints the same lines).
    items.push(
      h(
        "li",
        { class: "entry tool_result streaming live-tool", dataset: { call: tool.callId } },
        h("header", {}, h("b", {}, `tool · ${tool.name}`), h("small", {}, tool.status || "running")),
        h("pre", { class: "output" }, tool.output.slice(-4000)),
      ),
    );
  }
  const partial = partialOf(state.view);
  if (partial) {
    const text = (partial.content || []).filter((b) => b.type === "text").map((b) => b.text).join("");
    items.push(h("li", { class: "entry assistant streaming", id: "partial" }, h("header", {}, h("b", {}, "assistant"), h("small", {}, "streaming…")), h("div", { class: "text" }, text)));
  }
  const atBottom = list.scrollHeight - list.scrollTop - list.clientHeight < 40;
  replaceChildren(list, items);
  if (atBottom) list.scrollTop = list.scrollHeight;
}

function renderTasks() {
  const graph = state.tasks;
  const tasks = graph ? graph.tasks : [];
  // How many are live, beside the heading; the scheduler's state only when it is not
  // simply running (an empty table under "running" read as a contradiction).
  const count = tasks.length ? `${tasks.length} live` : "idle";
  const scheduler = graph && graph.scheduling !== "running" ? ` · scheduler ${graph.scheduling}` : "";
  $("scheduling").textContent = graph ? count + scheduler : "";
  const byOwner = new Map();
  for (const t of tasks) {
    const key = t.owner || 0;
    if (!byOwner.has(key)) byOwner.set(key, []);
    byOwner.get(key).push(t);
  }
  const known = new Set(tasks.map((t) => t.id));
  const rows = [];
  const visit = (task, depth) => {
    const args = task.arguments ? short(task.arguments, 120) : "";
    const stateText = task.abort_requested ? `${task.state} (abort)` : task.state;
    const phase = task.phase ? ` · ${task.phase}${task.attempt > 1 ? ` #${task.attempt}` : ""}` : "";
    rows.push(
      h(
        "tr",
        { dataset: { task: task.id, kind: task.kind, state: task.state } },
        h("td", { style: { paddingLeft: `${0.4 + depth * 1.2}em` } }, String(task.id)),
        h("td", {}, task.kind.replace(/^perdure\./, "")),
        h("td", { class: "tool" }, task.tool || ""),
        h("td", { class: "args" }, args),
        h("td", { class: `state ${task.state}` }, stateText + phase),
        h("td", {}, task.owner ? String(task.owner) : `conv ${task.conversation_id}`),
        h("td", {}, task.started_at ? elapsed(Date.now() - task.started_at) : ""),
      ),
    );
    for (const child of byOwner.get(task.id) || []) visit(child, depth + 1);
  };
  for (const t of tasks) if (!t.owner || !known.has(t.owner)) visit(t, 0);
  if (!rows.length) rows.push(h("tr", {}, h("td", { colspan: 7, class: "muted" }, "no live tasks")));
  replaceChildren($("tasks").tBodies[0], rows);
}

function renderTimers() {
  const timers = state.timers ? state.timers.timers : [];
  const items = timers.map((t) =>
    h(
      "li",
      { dataset: { timer: t.task, kind: t.kind } },
      h("b", {}, t.kind.replace(/^perdure\./, "")),
      ` ${t.message ? `“${t.message}” ` : ""}due ${isoTime(t.at)} (in ${elapsed(t.at - Date.now()) || "now"})`,
      t.kind === "perdure.reminder"
        ? h("button", { type: "button", class: "cancel-timer", disabled: $("remind").disabled, onclick: () => act("cancel reminder", "DELETE", `/v1/actors/${state.actor}/timers/${t.task}`) }, "cancel")
        : t.kind === "perdure.schedule"
          ? h("button", { type: "button", class: "cancel-timer", disabled: $("remind").disabled, onclick: () => act("cancel schedule", "DELETE", `/v1/actors/${state.actor}/conversations/${t.conversation_id}/schedules/${t.task}`) }, "cancel")
          : null,
    ),
  );
  if (!items.length) items.push(h("li", { class: "muted" }, "no pending timers"));
  if (state.timers && state.timers.next_wake) items.push(h("li", { class: "muted" }, `next wake ${isoTime(state.timers.next_wake)}`));
  replaceChildren($("timers"), items);
}

function renderUsage() {
  const docs = (state.view && state.view.docs) || {};
  const total = { ...((docs.usage && docs.usage.total) || {}) };
  // The current run's usage joins the ledger when the run ends: until then it is in live.
  const run = (docs.live && docs.live.run && docs.live.run.usage) || {};
  for (const used of Object.values(run)) {
    for (const key of ["input", "output", "cost"]) total[key] = (total[key] || 0) + (used[key] || 0);
  }
  const runs = usagePerRun(state.view);
  replaceChildren($("usage"), [
    h("p", { id: "usage-total" }, `conversation: ${total.input || 0} in · ${total.output || 0} out · ${money(total.cost)}`),
    compactionCounts(state.view) ? h("p", { id: "usage-compactions", class: "muted" }, compactionCounts(state.view)) : null,
    h(
      "table",
      { id: "usage-runs" },
      h("thead", {}, h("tr", {}, h("th", {}, "run"), h("th", {}, "turns"), h("th", {}, "in"), h("th", {}, "out"), h("th", {}, "cost"))),
      h(
        "tbody",
        {},
        runs.map((r, i) => h("tr", {}, h("td", { title: r.input }, `${i + 1}. ${short(r.input, 24)}`), h("td", {}, r.turns), h("td", {}, r.tokensIn), h("td", {}, r.tokensOut), h("td", {}, money(r.cost)))),
      ),
    ),
  ]);
}

function renderEvents() {
  const events = eventsOf(state.view, state.resumed);
  const items = events.map((e) => h("li", { dataset: { event: e.kind } }, h("b", {}, e.kind), e.time ? h("time", {}, isoTime(e.time)) : null, h("div", {}, short(e.text, 300))));
  if (!items.length) items.push(h("li", { class: "muted" }, "no events yet"));
  replaceChildren($("events"), items);
}

// ------------------------------------------------------------------ actions

function decide(approval, decision, note) {
  const body = note ? { decision, note } : { decision };
  return act(`${decision} ${approval.tool}`, "POST", `/v1/actors/${state.actor}/approvals/${approval.id}`, body);
}

async function act(label, method, path, body) {
  try {
    const answer = await state.api.request(method, path, body);
    notice(describeAnswer(label, answer));
    poll();
    return answer;
  } catch (error) {
    notice(`${label}: ${error.message}`, true);
    return null;
  }
}

function conversationPath(rest) {
  return `/v1/actors/${state.actor}/conversations/${state.conversationId}/${rest}`;
}

async function send(whenBusy) {
  const input = $("input");
  const content = input.value.trim();
  if (!content || !state.actor) return;
  const body = { type: "input", content, when_busy: whenBusy };
  if (state.conversationId !== 1) body.conversation_id = state.conversationId;
  const answer = await act(whenBusy === "steer" ? "steer" : "submit", "POST", `/v1/actors/${state.actor}/submissions`, body);
  if (answer) {
    input.value = "";
    refreshActors();
    refreshConversations().catch(() => {}); // the first submission creates the actor
  }
}

function wire() {
  $("login-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const token = $("token").value.trim();
    try {
      await connect(token);
      $("token").value = "";
    } catch (error) {
      showLogin(refusal("That token", error));
    }
  });
  $("sign-out").addEventListener("click", signOut);
  $("open-actor-form").addEventListener("submit", (event) => {
    event.preventDefault();
    selectActor($("open-actor").value.trim());
  });
  $("composer").addEventListener("submit", (event) => {
    event.preventDefault();
    send("follow_up");
  });
  $("steer").addEventListener("click", () => send("steer"));
  $("abort").addEventListener("click", () => act("abort", "POST", conversationPath("abort"), {}));
  $("compact").addEventListener("click", () => act("compact", "POST", conversationPath("compact"), {}));
  $("reminder-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const message = $("reminder-message").value.trim();
    const after = Number($("reminder-after").value);
    act("remind", "POST", conversationPath("reminders"), { message, after }).then((answer) => {
      if (answer) $("reminder-message").value = "";
    });
  });
  setInterval(() => state.tasks && renderTasks(), 1000); // elapsed times keep counting
}

// Why the token page is shown again: the host's reason for a refused token (expired,
// another actor's...), or what kept the page from connecting.
function refusal(which, error) {
  if (error instanceof ApiError && (error.status === 401 || error.status === 403)) {
    return `${which} was refused (${error.status}): ${error.message}`;
  }
  return `Could not connect: ${error.message}`;
}

async function boot() {
  wire();
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (!token) return showLogin();
  try {
    await connect(token);
  } catch (error) {
    showLogin(refusal("The saved token", error));
  }
}

boot();
