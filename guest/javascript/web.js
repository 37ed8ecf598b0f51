// The web APIs hyperlightd's JavaScript runner builds on its host functions: timers and the
// event loop that runs them, `crypto.getRandomValues`/`crypto.randomUUID` (the host's
// entropy) and `performance.now()` (the host's monotonic clock). Compiled into the daemon
// after web-apis.js (URL, URLSearchParams, structuredClone, TextEncoder/TextDecoder,
// queueMicrotask, atob/btoa and DOMException, bundled from npm as `vendor`; installed below)
// and before runner.js, as one module: `hl` is runner.js's import of the host module.

// ---- Timers and the event loop ----------------------------------------------------------
//
// The daemon drives the event loop, as libuv drives Node's. A program whose value is a promise,
// or that left a timer or a queued microtask, is answered with a promise for its reply (see
// `startLoop`), and hyperlight-js runs every queued promise reaction, however long the chain,
// until that promise settles. When none is left and it has not settled, the guest call ends
// (QuickJS's job queue ran dry), and the daemon calls the runner again to continue
// (`continueLoop`): the earliest timer runs, after waiting for it in the host without
// spinning, and its reactions run in turn; with no timer left, nothing can settle the
// program's promise any more. So every queued reaction runs before a timer, as in browsers and
// Node, and the program's time limit stops a loop that never ends (a microtask spin, a
// setInterval never cleared). A program whose value is not a promise, and that set no timer and
// queued no microtask, is answered at once: most programs never pay for the loop.

// Browsers and Node clamp delays past 2^31 - 1 ms to 1 ms; so do we.
const MAX_DELAY = 2147483647;

const timers = new Map(); // id -> { due, order, callback, args, interval }
let nextTimerId = 1;
let timerOrder = 0;

function timerDelay(delay) {
  delay = Number(delay);
  return delay >= 1 && delay <= MAX_DELAY ? delay : 1;
}

function addTimer(callback, delay, args, repeat) {
  if (typeof callback !== "function") {
    throw new TypeError("The callback must be a function, not " + typeof callback +
      " (strings are not evaluated)");
  }
  const id = nextTimerId++;
  delay = timerDelay(delay);
  timers.set(id, { due: hl.now(0) + delay, order: timerOrder++, callback, args, interval: repeat ? delay : 0 });
  return id;
}

function setTimeout(callback, delay, ...args) {
  return addTimer(callback, delay, args, false);
}

function setInterval(callback, delay, ...args) {
  return addTimer(callback, delay, args, true);
}

function clearTimer(id) {
  timers.delete(id);
}

// The timer to run next: the earliest due, then the first set.
function nextTimer() {
  let next = null;
  for (const [id, timer] of timers) {
    if (next === null || timer.due < next[1].due || (timer.due === next[1].due && timer.order < next[1].order)) {
      next = [id, timer];
    }
  }
  return next;
}

// Whether the program left work for the event loop: a timer, or a microtask it queued.
let microtasksQueued = false;
function hasPendingWork() {
  return timers.size > 0 || microtasksQueued || toolCalls.size > 0;
}

function queueMicrotask(callback) {
  microtasksQueued = true;
  vendor.queueMicrotask(callback);
}

// The loop of the program running now: how its value settled, and the promise for its reply
// (with what resolves it). Null when no loop is running.
let loop = null;

// Starts the loop for a program whose value is `value`: returns the promise for its reply,
// which resolves once the program's promise has settled and no timer is left, or at once with
// `failed(error)` if the program's promise rejects (as an unhandled rejection ends a Node
// process). `completed(value)` makes the reply of a settled value.
function startLoop(value, completed, failed) {
  let resolve;
  const reply = new Promise((r) => { resolve = r; });
  const state = { settled: true, value: value, reply, resolve, completed, failed, done: false };
  loop = state;
  microtasksQueued = false;
  if (value !== null && (typeof value === "object" || typeof value === "function") &&
      typeof value.then === "function") {
    state.settled = false;
    Promise.resolve(value).then(
      (v) => { state.settled = true; state.value = v; if (timers.size === 0) endLoop(state, completed(v)); },
      (e) => endLoop(state, failed(e)),
    );
  }
  return reply;
}

// Ends `state`'s loop with `reply`: the timers left are dropped (a session's next exec must not
// run them), and the reply promise resolves.
function endLoop(state, reply) {
  if (state.done) return reply;
  state.done = true;
  timers.clear();
  toolCalls.clear();
  if (loop === state) loop = null;
  state.resolve(reply);
  return reply;
}

// Called by the daemon when QuickJS's job queue ran dry before the reply settled: runs the
// earliest timer (waiting for it first) and returns the reply promise again, whose reactions
// run next; or, with no timer left, the reply itself.
function continueLoop() {
  const state = loop;
  if (state === null || state.done) {
    throw new Error("the runner was asked to continue, but no program is waiting on its event loop");
  }
  const next = nextTimer();
  if (toolCalls.size > 0) {
    // Wait for a tool's answer, until the next timer is due at the latest.
    const waited = awaitTool(next === null ? -1 : Math.max(0, next[1].due - hl.now(0)));
    if (waited === "answered") return state.reply;
    if (waited === "gone" || waited === "wall_clock") {
      return endLoop(state, { ok: false, error: { kind: "exception", message: waited === "gone" ?
        "the caller went away while the program waited for a tool" :
        "the execution's wall-clock cap passed while the program waited for a tool" } });
    }
    if (waited === "idle") toolCalls.clear();
    if (next === null) return state.reply;
  }
  if (next === null) {
    return endLoop(state, state.settled ? state.completed(state.value) : {
      ok: false,
      error: {
        kind: "exception",
        message: "the program's result is a promise that never settled: no timer or other " +
          "work was left that could settle it",
      },
    });
  }
  const [id, timer] = next;
  if (timer.due > hl.now(0)) flushOutput(); // runner.js: output is seen before a wait
  for (let left = timer.due - hl.now(0); left > 0; left = timer.due - hl.now(0)) hl.sleep(left);
  if (timer.interval > 0) {
    timer.due = Math.max(timer.due + timer.interval, hl.now(0));
    timer.order = timerOrder++;
  } else {
    timers.delete(id);
  }
  try {
    timer.callback(...timer.args);
  } catch (e) {
    // A timer callback that throws ends the program with its error, as an uncaught exception
    // ends a Node process.
    return endLoop(state, state.failed(e));
  }
  // What the callback queued runs next, before the next timer or the answer.
  return state.reply;
}

// ---- tools ---------------------------------------------------------------------------------
//
// The tools the running exec declared (its event's `tools`), as async functions of the global
// `tools`: `await tools.get_weather({city: "Paris"})`. The daemon checks a call (a declared
// tool, arguments its schema accepts, within the limits) and relays it to the caller; a call it
// refuses, and an error the caller answers, reject with a `ToolError`. Several calls may wait at
// once (Promise.all); the event loop waits for their answers, with the program's time limit
// standing still, when nothing else is left to run.

class ToolError extends Error {
  constructor(message) {
    super(message);
    this.name = "ToolError";
  }
}

// Calls waiting for their answers, by id: how to settle each one's promise.
const toolCalls = new Map();

function makeTools(declared) {
  const tools = Object.create(null);
  for (const { name, description } of declared || []) {
    const tool = (args) => callTool(name, args);
    Object.defineProperty(tool, "name", { value: name });
    tool.description = description || "";
    tools[name] = tool;
  }
  tools.ToolError = ToolError;
  Object.freeze(tools);
  // A name that is no tool is a function that says so (the host's message lists the tools),
  // rather than "not a function".
  return new Proxy(tools, {
    get(target, key) {
      if (key in target || typeof key !== "string" || key === "then" || key === "toJSON") {
        return target[key];
      }
      return (args) => callTool(key, args);
    },
  });
}

function callTool(name, args) {
  if (args === undefined) args = {};
  if (args === null || typeof args !== "object" || Array.isArray(args)) {
    return Promise.reject(new TypeError(`tools.${name}: pass the arguments as one object, {name: value, ...}`));
  }
  let text;
  try {
    text = JSON.stringify(args);
  } catch (e) {
    return Promise.reject(new TypeError(`tools.${name}: the arguments cannot be sent as JSON: ${e.message}`));
  }
  flushOutput(); // runner.js: what the program wrote before the call is seen before it
  const sent = hl.tool_call(name, text);
  if (sent.error !== undefined) return Promise.reject(new ToolError(`tools.${name}: ${sent.error}`));
  return new Promise((resolve, reject) => { toolCalls.set(sent.id, { name, resolve, reject }); });
}

// Waits for the answer to one of the calls waiting, at most `ms` milliseconds (-1: no bound),
// and settles its promise: "answered"; or how the wait ended otherwise: "until" (the time
// passed), "idle" (no call waits), "gone" (the caller went away), "wall_clock" (the exec's cap).
function awaitTool(ms) {
  flushOutput();
  const answer = hl.tool_wait(ms);
  if (answer.id === undefined) return answer.wait;
  const call = toolCalls.get(answer.id);
  toolCalls.delete(answer.id);
  if (call !== undefined) {
    if (answer.error !== undefined) call.reject(new ToolError(`tools.${call.name}: ${answer.error}`));
    else call.resolve(JSON.parse(answer.result));
  }
  return "answered";
}

// ---- crypto --------------------------------------------------------------------------------

const MAX_RANDOM_VALUES_BYTES = 65536;
const INTEGER_ARRAYS = [Int8Array, Uint8Array, Uint8ClampedArray, Int16Array, Uint16Array,
  Int32Array, Uint32Array, BigInt64Array, BigUint64Array];

// Fills `bytes` (a Uint8Array) from the host's entropy.
function fillRandom(bytes) {
  for (let start = 0; start < bytes.length;) {
    const hex = hl.random(bytes.length - start);
    if (typeof hex !== "string" || hex.length === 0) throw new Error("the host has no entropy to give");
    for (let i = 0; i < hex.length; i += 2) bytes[start++] = parseInt(hex.slice(i, i + 2), 16);
  }
}

const crypto = {
  getRandomValues(array) {
    if (!INTEGER_ARRAYS.some((type) => array instanceof type)) {
      throw new DOMException("The data argument must be an integer-type TypedArray", "TypeMismatchError");
    }
    if (array.byteLength > MAX_RANDOM_VALUES_BYTES) {
      throw new DOMException("The ArrayBufferView's byte length (" + array.byteLength +
        ") exceeds the number of bytes of entropy available via this API (65536)", "QuotaExceededError");
    }
    fillRandom(new Uint8Array(array.buffer, array.byteOffset, array.byteLength));
    return array;
  },
  randomUUID() {
    const b = new Uint8Array(16);
    fillRandom(b);
    b[6] = (b[6] & 0x0f) | 0x40; // version 4
    b[8] = (b[8] & 0x3f) | 0x80; // variant 10
    const hex = Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
    return hex.slice(0, 8) + "-" + hex.slice(8, 12) + "-" + hex.slice(12, 16) + "-" +
      hex.slice(16, 20) + "-" + hex.slice(20);
  },
};

// ---- performance ---------------------------------------------------------------------------

const performance = {
  // Milliseconds since the program started, monotonic, to the microsecond.
  now() {
    return hl.now(0);
  },
  // When the program started, in milliseconds since the epoch.
  get timeOrigin() {
    return Date.now() - hl.now(0);
  },
};

// ---- Installing them -----------------------------------------------------------------------

// From web-apis.js (npm), where QuickJS has none of its own.
for (const name of ["URL", "URLSearchParams", "structuredClone", "DOMException", "atob", "btoa"]) {
  if (!(name in globalThis)) {
    Object.defineProperty(globalThis, name, { value: vendor[name], writable: true, configurable: true, enumerable: false });
  }
}

for (const [name, value] of Object.entries({
  setTimeout,
  setInterval,
  clearTimeout: clearTimer,
  clearInterval: clearTimer,
  queueMicrotask,
  crypto,
  performance,
})) {
  Object.defineProperty(globalThis, name, { value, writable: true, configurable: true, enumerable: false });
}
