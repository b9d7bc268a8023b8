// A JavaScript stand-in for workerd's Durable Object state, backed by better-sqlite3.
//
// Class names are workerd's (SqlStorageCursor, SqlStorage, DurableObjectStorage,
// DurableObjectState, DurableObjectId): the Python Workers SDK dispatches on
// `constructor.name`, so `DurableObjectContext(state).storage` wraps this exactly as it
// wraps the real thing. workerd's SQL policy and limits are enforced here, so code that
// would fail in a Durable Object fails in the tests too:
//   - raw BEGIN/COMMIT/ROLLBACK/END/SAVEPOINT/RELEASE are refused (use transactionSync);
//     ATTACH/DETACH and pragmas outside a small allowlist are refused;
//   - a statement is at most 100 KB, binds at most 100 parameters;
//   - a bound or returned string/BLOB, and a returned row, is at most 2 MB
//     (better-sqlite3 exposes no sqlite3_limit, so a row written from several bound
//     values is checked per value only; the CPython stand-in enforces the row itself);
//   - bindings are null, numbers, strings and byte arrays (workerd refuses booleans and
//     BigInts, which are not among its documented binding types); blobs come back as
//     ArrayBuffers, as in workerd.
// A `DurableObjectHome` is what outlives an isolate: the SQLite file and the alarm.
// `home.open()` gives a fresh DurableObjectState (the previous one is evicted: its
// database handle is closed and every later call on it throws).

import Database from "better-sqlite3";

export const MAX_VALUE_BYTES = 2_000_000;
export const MAX_STATEMENT_BYTES = 100_000;
export const MAX_BINDINGS = 100;

const TRANSACTION_REFUSAL =
  "To execute a transaction, please use the state.storage.transaction() or " +
  "state.storage.transactionSync() APIs instead of the SQL BEGIN TRANSACTION or " +
  "SAVEPOINT statements.";
const ALLOWED_PRAGMAS = new Set(["table_info", "table_xinfo", "table_list", "index_list", "index_info"]);

function sizeOf(value) {
  if (typeof value === "string") return Buffer.byteLength(value);
  if (value instanceof Uint8Array) return value.byteLength;
  if (value instanceof ArrayBuffer) return value.byteLength;
  return 8;
}

function tooBig() {
  return new Error("string or blob too big: SQLITE_TOOBIG");
}

function checkPolicy(query) {
  if (Buffer.byteLength(query) > MAX_STATEMENT_BYTES) throw new Error("statement too long: SQLITE_TOOBIG");
  const head = query.replace(/^(\s|--[^\n]*\n|\/\*[\s\S]*?\*\/)*/, "");
  if (/^(BEGIN|COMMIT|END|ROLLBACK|SAVEPOINT|RELEASE)\b/i.test(head)) throw new Error(TRANSACTION_REFUSAL);
  if (/^(ATTACH|DETACH)\b/i.test(head)) throw new Error("not authorized: SQLITE_AUTH");
  const pragma = /^PRAGMA\s+(\w+)/i.exec(head);
  if (pragma && !ALLOWED_PRAGMAS.has(pragma[1].toLowerCase())) throw new Error("not authorized: SQLITE_AUTH");
}

function binding(value) {
  if (value === null || value === undefined) {
    if (value === undefined) throw new TypeError("undefined cannot be bound to a SQL parameter");
    return null;
  }
  if (typeof value === "number" || typeof value === "string") {
    if (sizeOf(value) > MAX_VALUE_BYTES) throw tooBig();
    return value;
  }
  if (value instanceof ArrayBuffer) value = new Uint8Array(value);
  if (value instanceof Uint8Array) {
    if (value.byteLength > MAX_VALUE_BYTES) throw tooBig();
    return Buffer.from(value.buffer, value.byteOffset, value.byteLength);
  }
  throw new TypeError(`${typeof value} cannot be bound to a SQL parameter`);
}

function fromSqlite(value) {
  if (Buffer.isBuffer(value)) return value.buffer.slice(value.byteOffset, value.byteOffset + value.byteLength);
  return value;
}

class RowIterator {
  constructor(rows, shape) {
    this._rows = rows;
    this._shape = shape;
  }
  next() {
    const row = this._rows.shift();
    return row === undefined ? { done: true, value: undefined } : { done: false, value: this._shape(row) };
  }
  [Symbol.iterator]() {
    return this;
  }
}

export class SqlStorageCursor {
  constructor(columnNames, rows, rowsWritten) {
    this.columnNames = columnNames;
    this._rows = rows;
    this.rowsRead = rows.length;
    this.rowsWritten = rowsWritten;
  }
  _object(row) {
    const out = {};
    this.columnNames.forEach((name, i) => (out[name] = row[i]));
    return out;
  }
  toArray() {
    const rows = this._rows.splice(0);
    return rows.map((r) => this._object(r));
  }
  one() {
    const rows = this.toArray();
    if (rows.length !== 1) throw new Error("Expected exactly one result from SQL query");
    return rows[0];
  }
  raw() {
    return new RowIterator(this._rows, (r) => r);
  }
  next() {
    const row = this._rows.shift();
    return row === undefined ? { done: true, value: undefined } : { done: false, value: this._object(row) };
  }
  [Symbol.iterator]() {
    return this;
  }
}

export class SqlStorage {
  constructor(owner) {
    this._owner = owner;
    this._cache = new Map();
    this.statements = 0;
    // Totals of the cursors' rowsRead / rowsWritten: rows returned and rows changed,
    // lower bounds of workerd's (which also counts rows scanned and index updates).
    this.rowsRead = 0;
    this.rowsWritten = 0;
  }
  _prepare(query) {
    let stmt = this._cache.get(query);
    if (stmt === undefined) {
      stmt = this._owner._db().prepare(query);
      if (stmt.reader) stmt.raw(true);
      this._cache.set(query, stmt);
    }
    return stmt;
  }
  exec(query, ...bindings) {
    this._owner._db();
    checkPolicy(query);
    if (bindings.length > MAX_BINDINGS) throw new Error("too many SQL variables: SQLITE_RANGE");
    const values = bindings.map(binding);
    this.statements += 1;
    const stmt = this._prepare(query);
    if (!stmt.reader) {
      const info = stmt.run(...values);
      this.rowsWritten += info.changes;
      return new SqlStorageCursor([], [], info.changes);
    }
    const columns = stmt.columns().map((c) => c.name);
    const rows = stmt.all(...values).map((row) => {
      let total = 0;
      const out = row.map((v) => {
        const size = sizeOf(v);
        if (size > MAX_VALUE_BYTES) throw tooBig();
        total += size;
        return fromSqlite(v);
      });
      if (total > MAX_VALUE_BYTES) throw tooBig();
      return out;
    });
    this.rowsRead += rows.length;
    return new SqlStorageCursor(columns, rows, 0);
  }
  get databaseSize() {
    const db = this._owner._db();
    return db.pragma("page_count", { simple: true }) * db.pragma("page_size", { simple: true });
  }
}

export class DurableObjectStorage {
  constructor(home) {
    this._home = home;
    this._database = new Database(home.path);
    // workerd's SQLite does not fsync in the request path (writes are confirmed through
    // the output gate); WAL with synchronous=NORMAL, as on the local host, keeps fsyncs
    // out of the per-round cost here too, so the CPython comparison is like for like.
    this._database.pragma("journal_mode = WAL");
    this._database.pragma("synchronous = NORMAL");
    this._evicted = false;
    this._depth = 0;
    this.transactions = 0;
    this.sql = new SqlStorage(this);
  }
  _db() {
    if (this._evicted) throw new Error("this isolate was evicted; its storage object is dead");
    return this._database;
  }
  transactionSync(fn) {
    const db = this._db();
    const name = `standin_sync_savepoint_${this._depth}`;
    db.exec(`SAVEPOINT ${name}`);
    this._depth += 1;
    this.transactions += 1;
    let result;
    try {
      result = fn();
    } catch (e) {
      this._depth -= 1;
      db.exec(`ROLLBACK TO ${name}`);
      db.exec(`RELEASE ${name}`);
      throw e;
    }
    this._depth -= 1;
    db.exec(`RELEASE ${name}`);
    return result;
  }
  async getAlarm() {
    this._db();
    return this._home.alarm;
  }
  async setAlarm(when) {
    this._db();
    this._home.alarm = when instanceof Date ? when.getTime() : Number(when);
    this._home.alarmSets += 1;
  }
  async deleteAlarm() {
    this._db();
    this._home.alarm = null;
    this._home.alarmDeletes += 1;
  }
  evict() {
    this._evicted = true;
    this._database.close();
  }
}

export class DurableObjectId {
  constructor(name) {
    this.name = name;
  }
  toString() {
    return Buffer.from(this.name).toString("hex").padEnd(64, "0").slice(0, 64);
  }
}

export class DurableObjectState {
  constructor(home) {
    this.id = new DurableObjectId(home.name);
    this.storage = new DurableObjectStorage(home);
    this._home = home;
  }
  // Hibernatable WebSockets: accepted sockets belong to the object, not the isolate,
  // so they live in the home and a new isolate's getWebSockets() still returns them.
  acceptWebSocket(ws, tags = []) {
    if (ws._accepted) throw new Error("this WebSocket was already accepted by the Worker");
    ws._home = this._home; // the client's messages now go to the object's handlers
    this._home.sockets.push([ws, [...tags]]);
  }
  getWebSockets(tag) {
    return this._home.sockets
      .filter(([ws, tags]) => ws.closed === null && (tag === undefined || tags.includes(tag)))
      .map(([ws]) => ws);
  }
  async blockConcurrencyWhile(fn) {
    return await fn();
  }
  waitUntil(_promise) {}
}

export class DurableObjectHome {
  constructor(path, name = "actor") {
    this.path = path;
    this.name = name;
    this.alarm = null;
    this.alarmSets = 0; // setAlarm / deleteAlarm calls, from every isolate
    this.alarmDeletes = 0;
    this.current = null;
    this.sockets = [];
    this.object = null; // the instance hibernatable sockets deliver to
  }
  // The Durable Object instance now serving this object (the last one is gone).
  attach(object) {
    this.object = object;
  }
  open() {
    if (this.current !== null && !this.current.storage._evicted) this.current.storage.evict();
    this.current = new DurableObjectState(this);
    return this.current;
  }
}

// The Durable Object namespace binding (env.ACTORS) as the front door sees it: it
// records every object it is asked for, and its stubs record what they were sent.
export class DurableObjectNamespace {
  constructor() {
    this.addressed = [];
    this.fetched = [];
  }
  idFromName(name) {
    return new DurableObjectId(name);
  }
  getByName(name) {
    this.addressed.push(name);
    return new DurableObjectStub(name, this);
  }
}

export class DurableObjectStub {
  constructor(name, namespace) {
    this.name = name;
    this._namespace = namespace;
  }
  async fetch(request) {
    const body = await request.text();
    this._namespace.fetched.push([this.name, request.method, new URL(request.url).pathname, body]);
    return new Response(JSON.stringify({ forwarded: this.name }), {
      status: 200,
      headers: { "content-type": "application/json" },
    });
  }
}

// The server end of a WebSocket as a Durable Object holds it: what it was sent, its
// attachment (structured-cloned, as workerd serialises it), and its close.
export class StandinWebSocket {
  constructor() {
    this.sent = [];
    this.closed = null;
    this._attachment = null;
  }
  send(message) {
    if (this.closed !== null) throw new Error("send on a closed WebSocket");
    this.sent.push(message);
  }
  close(code = 1000, reason = "") {
    this.closed = [code, reason];
  }
  serializeAttachment(value) {
    this._attachment = structuredClone(value);
  }
  deserializeAttachment() {
    return this._attachment === null ? null : structuredClone(this._attachment);
  }
}

// workerd's WebSocketPair: `new WebSocketPair()` is {0: client, 1: server}, two linked
// `WebSocket`s. What one end sends, the other receives. The server end is either
// accepted by the Worker itself (`accept()`: messages arrive as events) or handed to
// `state.acceptWebSocket(server)` (hibernatable): then each client message and close
// is delivered to the Durable Object's `webSocketMessage(server, message)` /
// `webSocketClose(server, code, reason, wasClean)` — on whichever instance currently
// serves the object (`home.attach(obj)`), so a socket outlives the instance that
// accepted it, as after hibernation. The client end records what it received.
export class WebSocket {
  constructor() {
    this.readyState = 1; // OPEN
    this.closed = null;
    this.received = [];
    this._peer = null;
    this._home = null; // set by acceptWebSocket: deliveries go to home.object
    this._accepted = false;
    this._listeners = { message: [], close: [] };
    this._attachment = null;
    this._deliveries = Promise.resolve();
  }
  accept() {
    if (this._home !== null) throw new Error("this WebSocket was already accepted for hibernation");
    this._accepted = true;
  }
  addEventListener(type, fn) {
    (this._listeners[type] ||= []).push(fn);
  }
  send(message) {
    if (this.closed !== null) throw new Error("send on a closed WebSocket");
    this._peer._arrive(message);
  }
  close(code = 1000, reason = "") {
    if (this.closed !== null) return;
    this.closed = [code, reason];
    this.readyState = 3; // CLOSED
    this._peer._closedByPeer(code, reason);
  }
  serializeAttachment(value) {
    this._attachment = structuredClone(value);
  }
  deserializeAttachment() {
    return this._attachment === null ? null : structuredClone(this._attachment);
  }
  // Resolves once every delivery this end has caused so far was handled.
  delivered() {
    return this._deliveries;
  }
  _dispatch(method, ...args) {
    const home = this._home;
    const run = async () => {
      if (home.object === null) throw new Error("no Durable Object instance to deliver to");
      await home.object[method](this, ...args);
    };
    this._peer._deliveries = this._peer._deliveries.then(run);
    return this._peer._deliveries;
  }
  _arrive(message) {
    if (this._home !== null) {
      this._dispatch("webSocketMessage", message);
      return;
    }
    this.received.push(message);
    for (const fn of this._listeners.message) fn({ data: message });
  }
  _closedByPeer(code, reason) {
    if (this._home !== null && this.closed === null) {
      this._dispatch("webSocketClose", code, reason, true);
      return;
    }
    this.closed ??= [code, reason];
    this.readyState = 3;
    for (const fn of this._listeners.close) fn({ code, reason, wasClean: true });
  }
}

export class WebSocketPair {
  constructor() {
    const client = new WebSocket();
    const server = new WebSocket();
    client._peer = server;
    server._peer = client;
    this[0] = client;
    this[1] = server;
  }
}

// workerd's Response also takes status 101 with the client end of a WebSocketPair
// (`new Response(null, {status: 101, webSocket: client})`); Node's refuses any status
// below 200, so this one stands in for it for 101 and is Node's for everything else.
export class Response extends globalThis.Response {
  constructor(body, init = undefined) {
    const upgrade = init !== undefined && init !== null && init.status === 101;
    if (upgrade && !(init.webSocket instanceof WebSocket)) {
      throw new TypeError("a 101 response needs the client end of a WebSocketPair");
    }
    super(upgrade ? null : body, upgrade ? { ...init, status: 200 } : init);
    this._upgrade = upgrade;
    this.webSocket = (init && init.webSocket) || null;
  }
  get status() {
    return this._upgrade ? 101 : super.status;
  }
}
