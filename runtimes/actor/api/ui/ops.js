// The watch's delta ops (core/docops.py), applied to the view in place:
//   ["r", value]                       replace the root
//   ["s", path, value]                 set a key or list index (index == length appends)
//   ["d", path]                        delete a key or list item
//   ["p", path, index, count, items]   splice a list
//   ["a", path, text]                  append text to a string (a streaming answer)

function walk(root, path) {
  let node = root;
  for (const step of path) {
    if (node === null || typeof node !== "object" || !(step in node)) {
      throw new Error(`path ${JSON.stringify(path)} does not exist`);
    }
    node = node[step];
  }
  return node;
}

function applyOne(root, op) {
  const [verb, path] = op;
  if (verb === "r") return op[1];
  if (verb === "p") {
    walk(root, path).splice(op[2], op[3], ...op[4]);
    return root;
  }
  if (path.length === 0) {
    if (verb === "s") return op[2];
    throw new Error(`op ${verb} needs a path`);
  }
  const parent = walk(root, path.slice(0, -1));
  const last = path[path.length - 1];
  if (verb === "s") parent[last] = op[2];
  else if (verb === "a") parent[last] = String(parent[last]) + op[2];
  else if (verb === "d") {
    if (Array.isArray(parent)) parent.splice(last, 1);
    else delete parent[last];
  } else throw new Error(`unknown op verb ${verb}`);
  return root;
}

export function applyOps(root, ops) {
  for (const op of ops) root = applyOne(root, op);
  return root;
}
