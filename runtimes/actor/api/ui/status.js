// What the top bar says after an action: a sentence for people, never the raw answer.
// ``label`` names the action (submit, steer, abort, compact, remind, cancel reminder,
// cancel schedule);
// ``answer`` is the API's JSON answer to it.

import { isoTime } from "/ui/render.js";

export function describeAnswer(label, answer) {
  const a = answer && typeof answer === "object" ? answer : {};
  switch (label) {
    case "submit":
    case "steer": {
      const what = label === "steer" ? "steer" : "message";
      if (a.id === null || a.id === undefined) return `${what} ${a.status || "accepted"}`;
      return `${what} sent: submission ${a.id}, ${a.status}`;
    }
    case "abort":
      return a.aborted ? `aborted ${a.aborted} task${a.aborted === 1 ? "" : "s"}` : "nothing to abort";
    case "compact":
      return `compaction started (task ${a.task})`;
    case "remind":
      return `reminder set for ${isoTime(a.at)} (task ${a.task})`;
    case "cancel reminder":
      return `reminder ${a.task} cancelled`;
    case "cancel schedule":
      return `schedule ${a.id} cancelled`;
    default:
      return a.task !== undefined ? `${label}: done (task ${a.task})` : `${label}: done`;
  }
}

// The scope a ``pat1.`` token carries (its payload, read without checking the signature:
// the host checks it on every request), or null for any other token.
export function tokenScope(token) {
  const parts = token.split(".");
  if (parts.length !== 3 || parts[0] !== "pat1") return null;
  try {
    const text = atob(parts[1].replace(/-/g, "+").replace(/_/g, "/"));
    const payload = JSON.parse(text);
    if (typeof payload.a !== "string") return null;
    return {
      actor: payload.a,
      rights: payload.r,
      conversation: typeof payload.c === "number" ? payload.c : null,
      expires: typeof payload.exp === "number" ? payload.exp : null,
    };
  } catch {
    return null;
  }
}
