// The web APIs hyperlightd's JavaScript runner builds on its host functions: timers and the
// event loop that runs them, `crypto.getRandomValues`/`crypto.randomUUID` (the host's
// entropy) and `performance.now()` (the host's monotonic clock). Compiled into the daemon
// after web-apis.js (URL, URLSearchParams, structuredClone, TextEncoder/TextDecoder,
// queueMicrotask, atob/btoa and DOMException, bundled from npm as `vendor`; installed below)
// and before runner.js, as one module: `hl` is runner.js's import of the host module.

// ---- Timers and the event loop ----------------------------------------------------------
//
// A program's timers run after it: the runner evaluates the program, then `runEventLoop`
// waits (in the host, without spinning) for the earliest timer, runs it, and goes on until no
// timer is left; the program's time limit stops a loop that never ends (a setInterval never
// cleared). Promise reactions run before the next timer, as in browsers and Node: the loop
// yields to the job queue MICROTASK_TURNS times between timers, so chains of reactions up to
// that deep complete first (QuickJS does not tell a script when its job queue is empty). A
// program whose value is not a promise, and that set no timer and queued no microtask, is
// answered at once: most programs never pay for the loop.

const MICROTASK_TURNS = 32;
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

async function microtaskTurns() {
  for (let i = 0; i < MICROTASK_TURNS; i++) await undefined;
}

// Whether the program left work for the event loop: a timer, or a microtask it queued.
let microtasksQueued = false;
function hasPendingWork() {
  return timers.size > 0 || microtasksQueued;
}

function queueMicrotask(callback) {
  microtasksQueued = true;
  vendor.queueMicrotask(callback);
}

// Runs promise reactions and timers until none is left, or until `stop()` says so. A timer
// callback that throws ends the loop with its error, as an uncaught exception ends a Node
// process.
async function runEventLoop(stop) {
  for (;;) {
    await microtaskTurns();
    const next = nextTimer();
    if (next === null || stop()) return;
    const [id, timer] = next;
    if (timer.due > hl.now(0)) flushOutput(); // runner.js: output is seen before a wait
    for (let left = timer.due - hl.now(0); left > 0; left = timer.due - hl.now(0)) hl.sleep(left);
    if (timer.interval > 0) {
      timer.due = Math.max(timer.due + timer.interval, hl.now(0));
      timer.order = timerOrder++;
    } else {
      timers.delete(id);
    }
    timer.callback(...timer.args);
  }
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
