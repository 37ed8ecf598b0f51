// hyperlightd's JavaScript runner.
//
// Registered once per sandbox as the hyperlight-js handler "run", before the warm snapshot is
// taken, so that a request pays only for its own program. hyperlight-js appends the
// `export { handler }` itself: this file must not export anything.
//
// Contract with the daemon (the same for every language):
//   event:  {"code": "<program text>", "max_result_bytes": N, "seed": "<32 hex digits>",
//            "session": <bool: run in the session's scope, which lives on in its saved state>,
//            "declared": "<the program with its top-level declarations made the session's>"
//              (a session's program, when the host's scan could tell them; else null),
//            "policy": {"blocked_globals": [...]} (optional: checked before the program runs),
//            "env": {"NAME": "value", ...} (the program's `process.env`, see setEnv)}
//          or {"continue": true}: the job queue ran dry while the program's reply was pending
//            (see web.js, the event loop)
//   reply:  {"ok": true, "result": <JSON value>}
//         | {"ok": false, "error": {"kind": "syntax_error" | "exception" | "result_too_large"
//                                           | "out_of_memory" | "policy_violation",
//                                   "message": "...", "violations": [...]}}
//   output: written through the host function hyperlightd.write(stream, text),
//           stream 1 = stdout, 2 = stderr; it answers false once the request's output cap is
//           reached. Every host call is a VM exit, so output is buffered here: the first
//           LINE_BY_LINE lines of a run go to the host line by line, the rest in blocks of
//           FLUSH_AT units; waiting for a timer sends what is pending. A program stopped at its
//           time limit loses what is still pending: past the first LINE_BY_LINE lines, at most
//           the last block.
//
// The program's result is its completion value, as with `eval` (and as in a notebook cell): the
// value of the last statement that produced one; a promise is awaited. A program may use
// `await` at its top level: it then runs as the body of an async function rewritten to answer
// the same value (program.js). After the program, its promise reactions and timers run (web.js)
// until its value has settled and no timer is left. Values JSON
// cannot carry (undefined, functions, symbols, BigInt, cycles) are rendered as strings;
// undefined becomes null.

import * as hl from "hyperlightd";

// The program's working directory: the request's files, kept by the host in its memory, and
// what the program writes there goes back to the caller. Paths are relative to it ("data.csv",
// "out/report.txt"); ".." above it, absolute paths and control characters are refused. Errors
// are thrown as Error with Node's `code` ("ENOENT", "ENOSPC", ...).
//   files.read(path) -> string (UTF-8)      files.readBytes(path) -> Uint8Array
//   files.write(path, string | Uint8Array | ArrayBuffer)   (makes its directories)
//   files.list() -> [{path, size}]          files.exists(path) -> bool
//   files.remove(path)                      (a file, or an empty directory)
const files = (() => {
  function call(fn, op, path, data) {
    const answer = hl[fn](String(path === undefined ? "" : path), data === undefined ? "" : data);
    if (answer === null || typeof answer !== "object") {
      throw new Error(`files.${op}: the host did not answer`);
    }
    if (answer.error !== undefined) {
      const error = new Error(`files.${op}(${JSON.stringify(String(path))}): ${answer.error}`);
      error.code = answer.code;
      throw error;
    }
    return answer.ok;
  }
  function toBase64(bytes) {
    let binary = "";
    for (let i = 0; i < bytes.length; i += 8192) {
      binary += String.fromCharCode.apply(null, bytes.subarray(i, i + 8192));
    }
    return vendor.btoa(binary);
  }
  function fromBase64(text) {
    const binary = vendor.atob(text);
    const bytes = new Uint8Array(binary.length);
    for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
    return bytes;
  }
  function bytesOf(data) {
    if (typeof data === "string") return new TextEncoder().encode(data);
    if (data instanceof Uint8Array) return data;
    if (data instanceof ArrayBuffer) return new Uint8Array(data);
    if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    throw new TypeError("files.write: the data must be a string, a Uint8Array or an ArrayBuffer");
  }
  const readBytes = (path) => fromBase64(call("file_read", "readBytes", path));
  return Object.freeze({
    read: (path) => new TextDecoder().decode(readBytes(path)),
    readBytes: readBytes,
    write: (path, data) => { call("file_write", "write", path, toBase64(bytesOf(data))); },
    list: () => call("file_list", "list", ""),
    exists: (path) => call("file_stat", "exists", path) !== null,
    remove: (path) => { call("file_remove", "remove", path); },
  });
})();
Object.defineProperty(globalThis, "files", { value: files, writable: true, configurable: true, enumerable: false });

// The program's environment variables, as Node's `process.env` (nothing else of Node's
// `process` is here: a guest has no process). An event's `env` is set there before its program
// runs; what it replaced is put back when the next event starts, unless the program changed it
// meanwhile, so that an exec's own variables do not outlive it in a session.
const programProcess = { env: {} };
Object.defineProperty(globalThis, "process", { value: programProcess, writable: true, configurable: true, enumerable: false });
let envSet = []; // [name, value set, value replaced (undefined: none)]

function setEnv(env) {
  const vars = programProcess.env;
  for (const [name, value, replaced] of envSet) {
    if (vars[name] !== value) continue;
    if (replaced === undefined) delete vars[name];
    else vars[name] = replaced;
  }
  envSet = [];
  for (const [name, value] of Object.entries(env || {})) {
    envSet.push([name, value, Object.prototype.hasOwnProperty.call(vars, name) ? vars[name] : undefined]);
    vars[name] = value;
  }
}

const STDOUT = 1;
const STDERR = 2;

function inspect(value) {
  switch (typeof value) {
    case "string":
      return value;
    case "undefined":
      return "undefined";
    case "function":
      return "[Function: " + (value.name || "(anonymous)") + "]";
    case "bigint":
      return value.toString() + "n";
    case "symbol":
      return value.toString();
    case "object":
      if (value === null) return "null";
      if (value instanceof Error) return value.stack ? value.name + ": " + value.message + "\n" + value.stack : String(value);
      try {
        const text = JSON.stringify(value);
        return text === undefined ? String(value) : text;
      } catch (_) {
        return String(value);
      }
    default:
      return String(value);
  }
}

// Cleared once the host says the output cap is reached: further writes are dropped here rather
// than sent to the host one by one. Set again by each run (a session's state keeps it).
let outputOpen = true;

// Pending output goes to the host once this many UTF-16 units are pending, and at each line for
// the first LINE_BY_LINE lines of a run: a host call is a VM exit (milliseconds under
// emulation, microseconds on hardware).
const FLUSH_AT = 8192;
const LINE_BY_LINE = 100;
let linesLeft = LINE_BY_LINE;
const pending = { [STDOUT]: [], [STDERR]: [] };
const pendingUnits = { [STDOUT]: 0, [STDERR]: 0 };

// The most UTF-16 code units one host call carries. A host call's arguments travel
// JSON-encoded through the guest's output buffer, which holds 64 KiB beyond the result limit;
// at worst six bytes a unit (\u00XX), 8192 units fit whatever the limits. A larger write would
// abort the guest.
const WRITE_CHUNK = 8192;

// Sends `text` to the host in pieces, never splitting a surrogate pair, until the host says the
// output cap is reached.
function send(stream, text) {
  let start = 0;
  while (outputOpen && start < text.length) {
    let end = Math.min(start + WRITE_CHUNK, text.length);
    if (end < text.length && (text.charCodeAt(end - 1) & 0xfc00) === 0xd800) end--;
    outputOpen = hl.write(stream, text.slice(start, end));
    start = end;
  }
}

function flushStream(stream) {
  if (pending[stream].length === 0) return;
  const text = pending[stream].join("");
  pending[stream] = [];
  pendingUnits[stream] = 0;
  send(stream, text);
}

// Sends all pending output: at the end of a run, and before the event loop waits.
function flushOutput() {
  flushStream(STDOUT);
  flushStream(STDERR);
}

function writer(stream) {
  return function (...args) {
    if (!outputOpen) return;
    const line = args.map(inspect).join(" ") + "\n";
    pending[stream].push(line);
    pendingUnits[stream] += line.length;
    if (linesLeft > 0) linesLeft--;
    else if (pendingUnits[stream] < FLUSH_AT) return;
    flushStream(stream);
  };
}

// The program sees this console (and print) instead of the runtime's frozen global one, which
// only has `log`. Both end in the same host-side buffers.
const programConsole = Object.freeze({
  log: writer(STDOUT),
  info: writer(STDOUT),
  debug: writer(STDOUT),
  error: writer(STDERR),
  warn: writer(STDERR),
  trace: writer(STDERR),
});
const programPrint = writer(STDOUT);

// A sloppy-mode function (the Function constructor does not inherit this module's strict mode)
// whose direct eval returns the completion value of the program: its last expression statement.
// `var` and function declarations stay local to this call.
const evaluate = new Function("console", "print", "__hyperlightd_program", "return eval(__hyperlightd_program);");

// Bytes of `text` in UTF-8. Past the limit it may return a lower bound, still past the limit.
function utf8Length(text, limit) {
  if (text.length * 3 <= limit || text.length > limit) return text.length;
  // ASCII is one byte a character: let the native regex engine drop it, count the rest.
  const rest = text.replace(/[\x00-\x7f]+/g, "");
  let bytes = text.length - rest.length;
  for (let i = 0; i < rest.length; i++) {
    const c = rest.charCodeAt(i);
    if (c < 0x800) bytes += 2;
    else if (c >= 0xd800 && c < 0xdc00) { bytes += 4; i++; }
    else bytes += 3;
  }
  return bytes;
}

// The program's value as JSON (text) and as the value the reply carries. Values JSON cannot
// carry are rendered as strings; undefined is null.
function serialize(value) {
  switch (typeof value) {
    case "undefined":
      return { result: null, json: "null" };
    case "function":
    case "symbol":
    case "bigint":
      value = inspect(value);
      return { result: value, json: JSON.stringify(value) };
  }
  try {
    const json = JSON.stringify(value);
    return json === undefined ? { result: null, json: "null" } : { result: value, json: json };
  } catch (_) {
    value = String(value);
    return { result: value, json: JSON.stringify(value) };
  }
}

// The reply for a completed program, with its value within the daemon's size limit.
function completed(value, maxBytes) {
  const { result, json } = serialize(value);
  if (utf8Length(json, maxBytes) > maxBytes) {
    return {
      ok: false,
      error: {
        kind: "result_too_large",
        message: "the result, as JSON, is over the limit of " + maxBytes +
          " bytes; print large output instead, or return less",
      },
    };
  }
  return { ok: true, result: result };
}

// The program's frames only: the stack ends where the runner's begin (the function made by a
// constructor that evaluates the program, then the handler in run.js). The program's own
// frames are in `<eval>`.
function programStack(stack) {
  const lines = stack.split("\n");
  const end = lines.findIndex((line) =>
    line.includes("run.js:") || line.trim().startsWith("at anonymous (<input>"));
  if (end < 0) return stack;
  return lines.slice(0, end).join("\n") + "\n";
}

// The longest error message a reply carries, in UTF-16 code units: the reply travels through
// the guest's output buffer, and a message of megabytes would not fit. The whole text still
// reaches stderr.
const MAX_MESSAGE = 8192;

function shortened(message) {
  if (message.length <= MAX_MESSAGE) return message;
  return message.slice(0, MAX_MESSAGE) + "... (" + (message.length - MAX_MESSAGE) +
    " more characters in stderr)";
}

function failure(kind, error) {
  // QuickJS reports a failed allocation as an InternalError rather than aborting.
  if (error instanceof Error && error.name === "InternalError" && error.message === "out of memory") {
    return { ok: false, error: { kind: "out_of_memory", message: "the program ran out of memory (InternalError: out of memory)" } };
  }
  let message;
  if (error instanceof Error) {
    message = error.name + ": " + error.message;
    if (error.stack) send(STDERR, message + "\n" + programStack(error.stack));
  } else {
    message = "Uncaught " + inspect(error);
    if (message.length > MAX_MESSAGE) send(STDERR, message + "\n");
  }
  return { ok: false, error: { kind: kind, message: shortened(message) } };
}

// Whether `error` means the program does not parse, as opposed to a SyntaxError the program
// threw while running (JSON.parse("{"), eval of bad text). Once the program runs, every error it
// throws carries a frame of its top level, `<eval>`; a parse error has none. Telling them apart
// this way spares compiling every program twice.
function isParseError(error) {
  return error instanceof SyntaxError &&
    !(typeof error.stack === "string" && error.stack.includes("at <eval> ("));
}

// Math.random for programs: xoshiro128** seeded from the host's entropy in every event. QuickJS
// seeds its own generator once, when the runtime starts, so every request, restored from the
// same snapshot, would draw the same numbers. Not for secrets (neither is Math.random).
const random = (() => {
  let s0 = 0, s1 = 0, s2 = 0, s3 = 1;
  const rotl = (x, k) => (x << k) | (x >>> (32 - k));
  function next() {
    const result = Math.imul(rotl(Math.imul(s1, 5), 7), 9) >>> 0;
    const t = s1 << 9;
    s2 ^= s0; s3 ^= s1; s1 ^= s2; s0 ^= s3; s2 ^= t;
    s3 = rotl(s3, 11);
    return result;
  }
  return {
    // `seed`: 32 hex digits (128 bits).
    seed(seed) {
      [s0, s1, s2, s3] = [0, 8, 16, 24].map((i) => parseInt(seed.slice(i, i + 8), 16) | 0);
      if ((s0 | s1 | s2 | s3) === 0) s3 = 1;
      // The first outputs depend on few state bits (a zero word shows): mix them away.
      for (let i = 0; i < 8; i++) next();
    },
    // A double in [0, 1) with 53 random bits, as Math.random gives.
    next() {
      return ((next() >>> 5) * 67108864 + (next() >>> 6)) / 9007199254740992;
    },
  };
})();
Math.random = function random_() { return random.next(); };
Object.defineProperty(Math.random, "name", { value: "random" });

// Sessions. A session's programs run in one scope that lives on from one exec to the next: the
// body of a generator, suspended between execs in the session's saved state. A direct eval
// there declares the program's `var`s and functions in that scope, where the next program's
// eval finds them. The generator is made by the constructor, so that it is sloppy code (this
// module is strict, and a strict eval keeps its declarations to itself).
const GeneratorFunction = Object.getPrototypeOf(function* () {}).constructor;
const sessionScope = new GeneratorFunction("console", "print",
  "let __hyperlightd_program = yield;\n" +
  "for (;;) {\n" +
  "  let __hyperlightd_step;\n" +
  "  try { __hyperlightd_step = { value: eval(__hyperlightd_program) }; }\n" +
  "  catch (e) { __hyperlightd_step = { error: e }; }\n" +
  "  __hyperlightd_program = yield __hyperlightd_step;\n" +
  "}");
// The session's scope; created by its first exec, kept in its saved state.
let session = null;

// Evaluates `text` in the session's scope: its value, or throws what it throws.
function evaluateInSession(text) {
  if (session === null) {
    session = sessionScope(programConsole, programPrint);
    session.next();
  }
  const step = session.next(text).value;
  if ("error" in step) throw step.error;
  return step.value;
}

// Evaluates a session's program with its top-level declarations made the session's: `declared`
// when the host found them (daemon/src/sandbox/javascript/declarations.rs, the same scan in a
// fraction of the time), else found here. Where the edited text does not parse, neither does
// the program (the edits make no program run that would not: guest/javascript/tests/), which is
// then evaluated as it is, so that the error reported is its own, where it is.
function evaluateDeclaring(code, declared) {
  const text = typeof declared === "string" ? declared : sessionDeclarations(code);
  if (text !== code) {
    try {
      return evaluateInSession(text);
    } catch (e) {
      if (!isParseError(e)) throw e;
    }
  }
  return evaluateInSession(code);
}

// Evaluates the program, in the session's scope if `persistent` (with its declarations as the
// host `declared` them, if it did): its value, or throws what it throws.
function evaluateProgram(code, persistent, declared) {
  const evaluateText = persistent
    ? evaluateInSession
    : (text) => evaluate(programConsole, programPrint, text);
  try {
    return persistent ? evaluateDeclaring(code, declared) : evaluateText(code);
  } catch (e) {
    // Only a program that does not parse as a script may have top-level await.
    const rewritten = isParseError(e) && /\bawait\b/.test(code) ? asyncProgram(code, persistent) : null;
    if (rewritten === null) throw e;
    return evaluateText(rewritten);
  }
}

function isThenable(value) {
  return value !== null && (typeof value === "object" || typeof value === "function") &&
    typeof value.then === "function";
}

// The runner's handler. An event with `continue` comes from the daemon when QuickJS's job queue
// ran dry before the reply promise of the program running now settled (web.js: the event loop).
function handler(event) {
  const reply = event.continue === true ? continueLoop() : start(event);
  if (!isThenable(reply)) {
    flushOutput();
    return reply;
  }
  return reply.finally(flushOutput);
}

function start(event) {
  Object.defineProperty(globalThis, "tools", { value: makeTools(event.tools), writable: true, configurable: true, enumerable: false });
  setEnv(event.env);
  random.seed(event.seed);
  outputOpen = true;
  linesLeft = LINE_BY_LINE;
  return run(event);
}

// At most this many violations go back; the message says how many more there were.
const MAX_VIOLATIONS = 100;
// Objects whose properties are the globals: `globalThis.eval` names `eval`.
const GLOBAL_OBJECTS = new Set(["globalThis", "self", "window", "global"]);

// Whether `node`, found under `parent[key]`, is a name that refers to no variable: a property
// or method name written after a dot or as a key, a label.
function isPropertyName(parent, key) {
  if (parent === null) return false;
  switch (parent.type) {
    case "MemberExpression":
      return key === "property" && !parent.computed;
    case "Property":
      // A shorthand `{ eval }` names the variable in its value, visited on its own.
      return key === "key" && !parent.computed;
    case "MethodDefinition":
    case "PropertyDefinition":
      return key === "key" && !parent.computed;
    case "LabeledStatement":
    case "BreakStatement":
    case "ContinueStatement":
      return key === "label";
    case "MetaProperty":
      return true;
    default:
      return false;
  }
}

// The name a computed property `[...]` spells out literally, if it does.
function literalName(node) {
  if (node.type === "Literal" && typeof node.value === "string") return node.value;
  if (node.type === "TemplateLiteral" && node.expressions.length === 0) return node.quasis[0].value.cooked;
  return undefined;
}

// What the program's syntax tree names that `blocked` (blocked_globals) refuses: the names as
// variables, and as properties of the global object (`globalThis.eval`, `this["Function"]`).
// A guard rail, not a boundary: a program bent on it can reach a global some other way.
function violations(ast, blocked) {
  const names = new Set(blocked);
  const found = [];
  const refuse = (node, name) => found.push({ line: node.loc.start.line, rule: "blocked_globals", name: name });
  const visit = (node, parent, key) => {
    if (Array.isArray(node)) {
      for (const child of node) visit(child, parent, key);
      return;
    }
    if (node === null || typeof node !== "object" || typeof node.type !== "string") return;
    if (node.type === "Identifier" && names.has(node.name) && !isPropertyName(parent, key)) {
      refuse(node, node.name);
    }
    if (node.type === "MemberExpression") {
      const object = node.object;
      const global = object.type === "ThisExpression" ||
        (object.type === "Identifier" && GLOBAL_OBJECTS.has(object.name));
      const name = node.computed ? literalName(node.property) : node.property.name;
      if (global && names.has(name)) refuse(node, name);
    }
    for (const child of Object.keys(node)) {
      if (child !== "loc") visit(node[child], node, child);
    }
  };
  visit(ast, null, null);
  return found;
}

// The reply refusing `code` under `policy`, or null when nothing is refused.
function refused(code, policy) {
  const blocked = (policy && policy.blocked_globals) || [];
  if (blocked.length === 0) return null;
  let ast;
  try {
    ast = vendor.parse(code, {
      ecmaVersion: "latest", sourceType: "script", allowAwaitOutsideFunction: true, locations: true,
    });
  } catch (e) {
    return failure("syntax_error", e);
  }
  const found = violations(ast, blocked).sort((a, b) => a.line - b.line);
  if (found.length === 0) return null;
  const shown = found.slice(0, MAX_VIOLATIONS);
  const listed = shown.map((v) => `line ${v.line}: ${v.name} (${v.rule})`).join("; ");
  const more = found.length > shown.length ? `; and ${found.length - shown.length} more` : "";
  const message = `the program was not run: it names what its policy refuses: ${listed}${more}`;
  return { ok: false, error: { kind: "policy_violation", message: message, violations: shown } };
}

function run(event) {
  const refusal = refused(event.code, event.policy);
  if (refusal !== null) return refusal;
  fetchMaxRequest = event.max_result_bytes; // fetch.js: a request travels as the result does
  let value;
  try {
    value = evaluateProgram(event.code, event.session === true, event.declared);
  } catch (e) {
    return failure(isParseError(e) ? "syntax_error" : "exception", e);
  }
  const maxBytes = event.max_result_bytes;
  if (!isThenable(value) && !hasPendingWork()) return completed(value, maxBytes);
  return startLoop(value, (v) => completed(v, maxBytes), (e) => failure("exception", e));
}

// ---- The allocator's free lists -----------------------------------------------------------
//
// The guest's allocator (hyperlight-guest-bin's, buddy_system_allocator 0.13) frees a block by
// walking the whole free list of its size for the block's buddy. Loading this runner leaves
// those lists long (the parse of the bundle frees blocks whose buddies live on), so every free
// of a small object walked them: in the nested-KVM VM an object cost about 80 µs and an
// `await` about 340 µs. Allocating these objects here, last, before the template's snapshot,
// empties the lists of their sizes, so that a program's objects are split from larger blocks
// and freed next to their buddies: about 17 µs and 70 µs (measured side by side in one VM).
// They hold a few hundred KiB of the heap, in the template's pages, which every sandbox shares.
const FREE_LIST_BALLAST = (() => {
  const keep = [];
  for (let i = 0; i < 1000; i++) {
    let resolve;
    const promise = new Promise((r) => { resolve = r; });
    keep.push(promise, resolve, { i }, [i], () => i);
  }
  return keep;
})();
