// hyperlightd's JavaScript runner.
//
// Registered once per sandbox as the hyperlight-js handler "run", before the warm snapshot is
// taken, so that a request pays only for its own program. hyperlight-js appends the
// `export { handler }` itself: this file must not export anything.
//
// Contract with the daemon (the same for every language):
//   event:  {"code": "<program text>"}
//   reply:  {"ok": true, "result": <JSON value>}
//         | {"ok": false, "error": {"kind": "syntax_error" | "exception", "message": "..."}}
//   output: written through the host function hyperlightd.write(stream, text),
//           stream 1 = stdout, 2 = stderr.
//
// The program's result is the value of its last expression statement, as with `eval` (and as in a
// notebook cell). Values JSON cannot carry (undefined, functions, symbols, BigInt, cycles) are
// rendered as strings; undefined becomes null.

import * as hl from "hyperlightd";

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

function writer(stream) {
  return function (...args) {
    hl.write(stream, args.map(inspect).join(" ") + "\n");
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

function toResult(value) {
  if (value === undefined) return null;
  switch (typeof value) {
    case "function":
    case "symbol":
    case "bigint":
      return inspect(value);
  }
  try {
    return JSON.stringify(value) === undefined ? null : value;
  } catch (_) {
    return String(value);
  }
}

// The program's frames only: the stack ends where the runner's begin (the Function wrapper that
// evaluates the program, then the handler in run.js).
function programStack(stack) {
  const lines = stack.split("\n");
  let end = lines.findIndex((line) => line.includes("run.js:"));
  if (end < 0) return stack;
  if (end > 0 && lines[end - 1].trim().startsWith("at anonymous (<input>")) end--;
  return lines.slice(0, end).join("\n") + "\n";
}

function failure(kind, error) {
  let message;
  if (error instanceof Error) {
    message = error.name + ": " + error.message;
    if (error.stack) hl.write(STDERR, message + "\n" + programStack(error.stack));
  } else {
    message = "Uncaught " + inspect(error);
  }
  return { ok: false, error: { kind: kind, message: message } };
}

function handler(event) {
  const code = event.code;
  // Parse first, without running, so that a SyntaxError thrown *by* the program at run time
  // (JSON.parse("{"), say) is not mistaken for a program that does not parse.
  try {
    new Function(code);
  } catch (e) {
    if (e instanceof SyntaxError) return failure("syntax_error", e);
    throw e;
  }
  let value;
  try {
    value = evaluate(programConsole, programPrint, code);
  } catch (e) {
    return failure("exception", e);
  }
  if (value !== null && typeof value === "object" && typeof value.then === "function") {
    return Promise.resolve(value).then(
      (v) => ({ ok: true, result: toResult(v) }),
      (e) => failure("exception", e),
    );
  }
  return { ok: true, result: toResult(value) };
}
