// DOM building and formatting helpers (no framework: the page is small).

export function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "style") Object.assign(node.style, value); // CSSOM: allowed by the CSP
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// Times for people: ISO-8601 with the zone (the API keeps epoch milliseconds).
export function isoTime(ms) {
  if (typeof ms !== "number") return "";
  return new Date(ms).toISOString();
}

export function elapsed(ms) {
  if (typeof ms !== "number" || ms < 0) return "";
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  const m = Math.floor(s / 60);
  return `${m} min ${Math.floor(s % 60)} s`;
}

export function money(cost) {
  return `$${(cost || 0).toFixed(6)}`;
}

export function short(value, max = 80) {
  const text = typeof value === "string" ? value : JSON.stringify(value);
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

export function replaceChildren(node, children) {
  node.replaceChildren(...children.filter((c) => c !== null && c !== undefined));
}
