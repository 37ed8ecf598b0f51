// The JavaScript runner's program rewrite (guest/javascript/program.js) against V8's own `eval`,
// run by Node on the host (`cargo xtask test`; alone: `node --test guest/javascript/tests/`).
//
// A program with top-level `await` must answer the completion value that `eval` gives the same
// program without it. The cases in completion-cases.json (which the end-to-end tests also run
// in the guest, against QuickJS) say which value, and each is checked three ways: the value
// itself against V8's eval of the program with its `await`s removed (every `await` there is of
// a plain value, so removing it changes nothing else), then the rewrite, as a plain program and
// as a session's. Then random programs of every statement kind are checked the same way.

"use strict";

const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");
const test = require("node:test");
const vm = require("node:vm");

const guest = path.join(__dirname, "..");
const rewrite = vm.runInThisContext(
  fs.readFileSync(path.join(guest, "web-apis.js"), "utf8") + "\n" +
  fs.readFileSync(path.join(guest, "program.js"), "utf8") +
  "\n;({ asyncProgram })",
);

// What a direct `eval` of `text` in a fresh realm comes to, as the runner evaluates a program:
// its value (a promise awaited) or what it threw. (Not the value of a script run by
// `vm.runInContext`: V8 gives a script of `try { function f() {} } finally {}` the function.)
async function outcome(text) {
  const context = vm.createContext({ program: text });
  try {
    const value = await vm.runInContext("eval(program)", context);
    return { value: value === undefined ? null : value };
  } catch (error) {
    return { threw: String(error) };
  }
}

const withoutAwait = (program) => program.replaceAll("for await (", "for (").replaceAll("await ", "");

async function check(program) {
  const expected = await outcome(withoutAwait(program));
  for (const persistent of [false, true]) {
    const text = rewrite.asyncProgram(program, persistent);
    assert.notEqual(text, null, `${program}: does not parse`);
    assert.deepEqual(await outcome(text), expected, `${program}\n(session: ${persistent})\nrewritten:\n${text}`);
  }
  return expected;
}

const cases = JSON.parse(fs.readFileSync(path.join(__dirname, "completion-cases.json"), "utf8"));

for (const { name, program, value } of cases) {
  test(`completion value: ${name}`, async () => {
    assert.match(program, /\bawait\b/, "every case has a top-level await");
    assert.deepEqual(await check(program), { value }, program);
  });
}

// ---- Random programs ------------------------------------------------------------------------
//
// Statements of every kind, nested, with values that tell which statement produced them, breaks
// and continues to enclosing loops and labels, exceptions in and out of `try`. Loops are bounded
// by counters of their own.

function generator(seed) {
  let state = seed >>> 0;
  const random = (n) => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state % n;
  };
  let counter = 0;
  const value = () => (random(2) === 0 ? "await " : "") + ++counter;
  const condition = () => ["true", "false", "(" + value() + ") % 2", "await false"][random(4)];

  // A statement. `scope`: {loops: labels of enclosing loops (null for an unlabelled one),
  // labels: every enclosing label, inSwitch, inFinally}.
  function statement(depth, scope) {
    const leaf = depth <= 0;
    switch (leaf ? random(4) : random(17)) {
      case 0: return value() + ";";
      case 1: return ";";
      case 2: return jump(scope);
      case 3: return "var v" + ++counter + " = " + value() + ";";
      case 4: return "{ " + list(depth - 1, scope) + " }";
      case 5: return "if (" + condition() + ") " + single(depth - 1, scope);
      case 6: return "if (" + condition() + ") " + single(depth - 1, scope) + " else " + single(depth - 1, scope);
      case 7: return loop(depth, scope, null);
      case 8: {
        const label = "l" + ++counter;
        if (random(2) === 0) return loop(depth, scope, label);
        return label + ": { " + list(depth - 1, { ...scope, labels: [...scope.labels, label] }) + " }";
      }
      case 9: return "switch (" + value() + " % 3) { case 0: " + list(depth - 1, { ...scope, inSwitch: true }) +
        " case 1: " + list(depth - 1, { ...scope, inSwitch: true }) + " default: " + list(depth - 1, { ...scope, inSwitch: true }) + " }";
      case 10: return "try { " + list(depth - 1, scope) + " } catch (e) { " + list(depth - 1, scope) + " }";
      case 11: return "try { " + list(depth - 1, scope) + " } finally { " + list(depth - 1, inFinally(scope)) + " }";
      case 12: return "try { " + list(depth - 1, scope) + " } catch { " + list(depth - 1, scope) + " } finally { " + list(depth - 1, inFinally(scope)) + " }";
      case 13: return scope.inFinally ? value() + ";" : "if (" + condition() + ") throw " + value() + ";";
      case 14: return "with ({}) " + single(depth - 1, scope);
      case 15: return "let b" + ++counter + " = " + value() + ";";
      default: return "function f" + ++counter + "() { " + ++counter + "; }";
    }
  }
  // Nothing throws in a `finally` block: V8 gives `try { try { 1 } finally { throw 0 } } catch
  // {}` the value 1, where ECMA-262 (and the rewrite) give undefined, the empty catch's.
  const inFinally = (scope) => ({ ...scope, inFinally: true });
  // A statement where the grammar takes one (no lexical declaration).
  function single(depth, scope) {
    for (;;) {
      const s = statement(depth, scope);
      if (!s.startsWith("let ") && !s.startsWith("function ")) return s;
    }
  }
  function list(depth, scope) {
    const n = random(4);
    const items = [];
    for (let i = 0; i < n; i++) items.push(statement(depth, scope));
    return items.join(" ");
  }
  function loop(depth, scope, label) {
    const i = "i" + ++counter;
    const inner = { ...scope, loops: [...scope.loops, label], labels: label ? [...scope.labels, label] : scope.labels };
    const body = single(depth - 1, inner);
    const labelled = label ? label + ": " : "";
    switch (random(4)) {
      case 0: return labelled + "for (let " + i + " = 0; " + i + " < 2; " + i + "++) " + body;
      case 1: return labelled + "for (const " + i + " of [1, 2]) " + body;
      case 2: return labelled + "for (const " + i + " in { a: 1, b: 2 }) " + body;
      default: return "{ let " + i + " = 0; " + labelled + "do " + body + " while (++" + i + " < 2); }";
    }
  }
  // A break or continue that has a target here, or an expression where none has.
  function jump(scope) {
    const options = [];
    if (scope.loops.length > 0 || scope.inSwitch) options.push("break;");
    if (scope.loops.length > 0) options.push("continue;");
    for (const label of scope.labels) options.push("break " + label + ";");
    for (const label of scope.loops) if (label) options.push("continue " + label + ";");
    return options.length === 0 ? value() + ";" : options[random(options.length)];
  }
  return () => {
    counter = 0;
    return "await 0; " + list(4, { loops: [], labels: [], inSwitch: false, inFinally: false });
  };
}

test("completion value: random programs of every statement kind", async () => {
  const next = generator(20261201);
  for (let i = 0; i < 3000; i++) await check(next());
});
