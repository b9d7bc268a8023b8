// The actor HTTP API as the inspector uses it: JSON requests with the bearer token, and
// the watch stream read with fetch (EventSource cannot send an Authorization header).

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export class Api {
  constructor(token) {
    this.token = token;
  }

  headers(extra = {}) {
    return { Authorization: `Bearer ${this.token}`, ...extra };
  }

  async request(method, path, body, signal) {
    const init = { method, headers: this.headers(), cache: "no-store", signal };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const response = await fetch(path, init);
    const text = await response.text();
    let value = null;
    try {
      value = text ? JSON.parse(text) : null;
    } catch {
      // Not JSON (a proxy's error page): say the status, not the parser's complaint.
      if (response.ok) throw new ApiError(response.status, "not_json", "the host answered something other than JSON");
    }
    if (!response.ok) {
      const error = (value && value.error) || {};
      throw new ApiError(response.status, error.code || "http_error", error.message || `HTTP ${response.status}`);
    }
    return value;
  }

  get(path) {
    return this.request("GET", path);
  }

  // Reads the SSE stream at ``path`` and calls ``onFrame`` with each event's JSON (the
  // event name is the frame's ``type``). Resolves when the stream ends; rejects on a
  // refused request or a broken connection. ``signal`` stops it.
  async watch(path, onFrame, signal) {
    const response = await fetch(path, {
      headers: this.headers({ Accept: "text/event-stream" }),
      cache: "no-store",
      signal,
    });
    if (!response.ok) {
      const value = await response.json().catch(() => ({}));
      const error = value.error || {};
      throw new ApiError(response.status, error.code || "http_error", error.message || "");
    }
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        const data = block
          .split("\n")
          .filter((line) => line.startsWith("data:"))
          .map((line) => line.slice(5).replace(/^ /, ""))
          .join("\n");
        if (data) onFrame(JSON.parse(data)); // comments (": ping") carry no data
      }
    }
  }
}
