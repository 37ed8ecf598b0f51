// `fetch`, `Headers` and `Response` on the host function `fetch`: the host makes the request
// (checked against what the execution may reach, with the operator's secrets added) and
// answers with the whole response, so the program never holds a socket. Compiled into the
// daemon after web.js and before runner.js.
//
// The host call blocks until the response is whole: requests run one after another, and no
// timer fires meanwhile. A request that fails (refused, a limit, a time-out, the network)
// rejects with a TypeError, as browsers' fetch does, whose `cause.kind` says which.

const FETCH_CHUNK = 8192;
// The most characters a request may carry to the host: it travels through the guest's output
// buffer, which holds the result limit (runner.js sets it from each event).
let fetchMaxRequest = FETCH_CHUNK;

function bytesToBase64(bytes) {
  let binary = "";
  for (let i = 0; i < bytes.length; i += FETCH_CHUNK) {
    binary += String.fromCharCode.apply(null, bytes.subarray(i, i + FETCH_CHUNK));
  }
  return vendor.btoa(binary);
}

function base64ToBytes(text) {
  const binary = vendor.atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

class Headers {
  #list = []; // [lower-case name, value]
  constructor(init) {
    if (init === undefined || init === null) return;
    const pairs = init instanceof Headers ? init.entries()
      : Array.isArray(init) || typeof init[Symbol.iterator] === "function" ? init
      : Object.entries(init);
    for (const pair of pairs) {
      if (pair.length !== 2) throw new TypeError("Headers: each header is a [name, value] pair");
      this.append(pair[0], pair[1]);
    }
  }
  append(name, value) { this.#list.push([String(name).toLowerCase(), String(value)]); }
  set(name, value) { this.delete(name); this.append(name, value); }
  delete(name) {
    const lower = String(name).toLowerCase();
    this.#list = this.#list.filter(([n]) => n !== lower);
  }
  get(name) {
    const lower = String(name).toLowerCase();
    const values = this.#list.filter(([n]) => n === lower).map(([, v]) => v);
    return values.length === 0 ? null : values.join(", ");
  }
  has(name) { return this.get(name) !== null; }
  *entries() {
    const names = [...new Set(this.#list.map(([n]) => n))].sort();
    for (const name of names) yield [name, this.get(name)];
  }
  *keys() { for (const [name] of this.entries()) yield name; }
  *values() { for (const [, value] of this.entries()) yield value; }
  forEach(callback, thisArg) { for (const [name, value] of this.entries()) callback.call(thisArg, value, name, this); }
  [Symbol.iterator]() { return this.entries(); }
  // The pairs as given, in order: what the host sends.
  pairs() { return this.#list.map(([n, v]) => [n, v]); }
}

class Response {
  #body;
  #used = false;
  constructor(body, init = {}) {
    this.#body = body === undefined || body === null ? new Uint8Array(0)
      : typeof body === "string" ? new TextEncoder().encode(body) : bytesOf(body, "Response");
    this.status = init.status === undefined ? 200 : init.status;
    this.statusText = init.statusText || "";
    this.headers = new Headers(init.headers);
    this.url = init.url || "";
    this.redirected = Boolean(init.redirected);
    this.type = "basic";
  }
  get ok() { return this.status >= 200 && this.status < 300; }
  get bodyUsed() { return this.#used; }
  #take() {
    if (this.#used) return Promise.reject(new TypeError("Response: the body was already read"));
    this.#used = true;
    return Promise.resolve(this.#body);
  }
  arrayBuffer() { return this.#take().then((b) => b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength)); }
  bytes() { return this.#take().then((b) => new Uint8Array(b)); }
  text() { return this.#take().then((b) => new TextDecoder().decode(b)); }
  json() { return this.text().then((t) => JSON.parse(t)); }
  clone() {
    if (this.#used) throw new TypeError("Response.clone: the body was already read");
    return new Response(new Uint8Array(this.#body), this);
  }
}

// The bytes of a request's or response's body.
function bytesOf(body, what) {
  if (typeof body === "string") return new TextEncoder().encode(body);
  if (body instanceof Uint8Array) return body;
  if (body instanceof ArrayBuffer) return new Uint8Array(body);
  if (ArrayBuffer.isView(body)) return new Uint8Array(body.buffer, body.byteOffset, body.byteLength);
  if (body instanceof URLSearchParams) return new TextEncoder().encode(body.toString());
  throw new TypeError(`${what}: a body is a string, an ArrayBuffer, a typed array or URLSearchParams`);
}

function fetchFailed(error) {
  const failed = new TypeError(`fetch failed: ${error.message}`);
  failed.cause = { kind: error.kind, message: error.message };
  return failed;
}

function fetch(input, init = {}) {
  try {
    return Promise.resolve(fetchNow(input, init || {}));
  } catch (e) {
    return Promise.reject(e);
  }
}

function fetchNow(input, init) {
  const url = typeof input === "string" ? input : input instanceof URL ? input.href
    : input && typeof input.url === "string" ? input.url : String(input);
  const method = String(init.method || (input && input.method) || "GET").toUpperCase();
  const headers = new Headers(init.headers || (input && input.headers));
  const redirect = init.redirect || "follow";
  if (!["follow", "manual", "error"].includes(redirect)) {
    throw new TypeError(`fetch: redirect is "follow", "manual" or "error", not ${JSON.stringify(redirect)}`);
  }
  const request = { method, url, redirect: redirect === "follow" ? "follow" : "manual" };
  if (init.body !== undefined && init.body !== null) {
    if (method === "GET" || method === "HEAD") throw new TypeError(`fetch: a ${method} request has no body`);
    if (init.body instanceof URLSearchParams && !headers.has("content-type")) {
      headers.set("content-type", "application/x-www-form-urlencoded;charset=UTF-8");
    } else if (typeof init.body === "string" && !headers.has("content-type")) {
      headers.set("content-type", "text/plain;charset=UTF-8");
    }
    request.body = bytesToBase64(bytesOf(init.body, "fetch"));
  }
  request.headers = headers.pairs();
  const text = JSON.stringify(request);
  if (text.length > fetchMaxRequest) {
    throw fetchFailed({ kind: "limit", message: `the request is ${text.length} bytes encoded; ` +
      `the sandbox sends at most ${fetchMaxRequest} (the daemon's --max-result-bytes)` });
  }
  flushOutput(); // runner.js: what the program wrote before the request is seen before it
  const answer = hl.fetch(text);
  if (answer === null || typeof answer !== "object") throw fetchFailed({ kind: "failed", message: "the host did not answer" });
  if (answer.error !== undefined) throw fetchFailed(answer.error);
  if (redirect === "error" && answer.status >= 300 && answer.status < 400 && answer.status !== 304) {
    throw fetchFailed({ kind: "refused", message: `${url} redirected, and redirect is "error"` });
  }
  return new Response(base64ToBytes(answer.body), {
    status: answer.status,
    statusText: answer.status_text || "",
    headers: answer.headers,
    url: answer.url,
    redirected: answer.redirected,
  });
}

for (const [name, value] of Object.entries({ fetch, Headers, Response })) {
  Object.defineProperty(globalThis, name, { value, writable: true, configurable: true, enumerable: false });
}
