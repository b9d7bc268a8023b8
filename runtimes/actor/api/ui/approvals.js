// Tool calls waiting for a person's decision (GET /v1/actors/{a}/approvals), each with
// Approve and Deny buttons and an optional note (a denial's note is what the agent reads).
// Self-contained: app.js polls the list and hands it here with how to decide.

import { h, isoTime, short } from "/ui/render.js";

// ``decide(approval, decision, note)`` posts the decision (``null``: the token may only
// read, so no buttons); returns the list's items.
export function approvalItems(approvals, decide) {
  if (!approvals.length) return [h("li", { class: "muted" }, "no pending approvals")];
  return approvals.map((a) => {
    const note = h("input", { class: "approval-note", placeholder: "note (optional)", maxlength: 4000 });
    const expires = a.expires_at ? ` · denied at ${isoTime(a.expires_at)} if undecided` : "";
    return h(
      "li",
      { dataset: { approval: a.id } },
      h("b", {}, a.tool),
      ` ${short(a.arguments, 120)} · conversation ${a.conversation_id} · asked ${isoTime(a.asked_at)}${expires}`,
      decide
        ? h("div", {}, note,
            h("button", { type: "button", class: "approve", onclick: () => decide(a, "approve", note.value) }, "Approve"),
            h("button", { type: "button", class: "deny", onclick: () => decide(a, "deny", note.value) }, "Deny"),
          )
        : null,
    );
  });
}
