// The JavaScript runner's program rewrite (guest/javascript/program.js) against V8's own `eval`,
// run by Node on the host (`cargo xtask test`; alone: `node --test guest/javascript/tests/`).
//
// A program with top-level `await` must answer the completion value that `eval` gives the same
// program without it. The cases in completion-cases.json (which the end-to-end tests also run
// in the guest, against QuickJS) say which value, and each is checked three ways: the value
// itself against V8's eval of the program with its `await`s removed (every `await` there is of
// a plain value, so removing it changes nothing else), then the rewrite, as a plain program and
// as a session's. Then random programs of every statement kind are checked the same way.
//
// A session's top-level declarations are found from the program's tokens (scanDeclarations)
// where they can be, by acorn's parse otherwise: the two must agree on every program the scan
// answers, and the scan must answer the common ones.

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
  "\n;({ asyncProgram, scanDeclarations, parsedDeclarations, sessionDeclarations, Scan, compiles, edited })",
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

// ---- A session's declarations: the scan against the parse ----------------------------------

// Programs whose tokens need a second look: regular expressions and divisions, templates in
// templates, comments and strings holding brackets and keywords, `let` as a name, statements
// without semicolons, classes of every heritage.
const tricky = [
  "const xs = []; for (let i = 0; i < 100; i++) xs.push(i * i); JSON.stringify(xs.reduce((a, b) => a + b, 0))",
  "class A extends B.c { m() { return `x${ {a:1}.a }` } }\nlet [q] = [1]\nconst r = /a{/g",
  "var B = { c: class {} }; class A extends B.c {}", "let = 5; let\nx = 1", "var let = 1; let.x = 2",
  "x = 4; y = 2; z = x / y; w = /re/.test('re')", "var foo = () => 1\nfoo()\nconst z = 2",
  "if (true) /a/.test('a')\nconst k = 1", "const s = `a${`b${1}`}c`; let t = s.length / 2\nclass Q {}",
  "function mixin(b, o) { return b } class B {} class A extends mixin(B, {x: 1}) { }",
  "var x = 1.\nconst y = 2 / 3", "const a = '{', b = \"}\", c = `${'}'}{`; let d = a + b + c",
  "// const nope = 1\n/* let nope = 2 */ const yes = 3 /* } */", "const { p, q: [r] } = { p: 1, q: [2] }",
  "let [m, ...n] = [1, 2, 3]; class K { static x = 1; #y = 2; get y() { return this.#y } }",
  "var o = { let: 1, const: 2, class: 3 }; o.let + o.const + o.class",
  "label: { break label } const after = 1", "do ; while (false) const afterDo = 1",
  "var i = 0; i++\nconst afterIncrement = i", "var a = [1]\n[0].length\nconst c = 1",
  "var re = /[/]{/g, s = 'x'.replace(re, '')\nlet t = s", "const n = (1 + 2) / 3; let m = n",
  "for (const v of [1]) { let w = v } const after = 2", "switch (1) { case 1: let x = 1 } let y = 2",
  "try { const a = 1 } catch { let b = 2 } finally { class C {} } class D {}",
  "const f = function () { const inner = 1; return inner }\nf()",
  "const g = async () => { let x = await 1; return x }; let h = g",
  "var w = 'a\\\n b'; let after = w", "(function () {})\nclass AfterParen {}",
  "const x = 1; typeof /re/; let y = x", "var tpl = `${1}${`${2}`}`\nconst z = tpl",
  "var x = {} / 2\nconst y = 1", "{ let inBlock = 1 } let outside = 2", "const a = 1, b = 2, c = a + b",
  "x = 1\n++x\nconst y = x", "class E extends (class {}) {}", "class F extends Object { constructor() { super() } }",
  "let\n[a] = [1]", "let\n{b} = {b: 1}", "if (true) { } else { } const z = 3",
];

// Programs that do not run: the rewrite must not make them run. The runner evaluates a
// program as it is when its rewritten text does not parse, so that the eval says why.
const invalid = ["const x;", "let x; let x;", "if (true) let x = 1", "let x = 1; var x = 2", "class { }",
  "const y = ;", "let z = `${`", "const a = 1\nconst a = 2"];

// Whether V8 compiles `text`: the runner's own check, which asks QuickJS in the guest.
const compiles = rewrite.compiles;

// Whether the scan answers for `program` without compiling it.
function certain(program) {
  const scan = new rewrite.Scan(program);
  return scan.run() && scan.certain();
}

function agree(program) {
  const scanned = rewrite.scanDeclarations(program);
  if (scanned !== null) assert.deepEqual(scanned, rewrite.parsedDeclarations(program), program);
  return scanned !== null;
}

test("session declarations: the scan agrees with the parse on tricky programs", () => {
  const answered = tricky.filter(agree).length;
  assert.ok(answered >= tricky.length - 6, `the scan answered ${answered} of ${tricky.length}`);
});

test("session declarations: a program that does not run is not made to run", () => {
  for (const program of invalid) {
    assert.equal(compiles(program), false, program);
    assert.equal(compiles(rewrite.sessionDeclarations(program)), false, program);
  }
});

// Programs of a few declarations of a few names, of every kind whose early errors a `let`,
// `const` or `class` has and a `var` lacks: the same name twice, a `var` or a function of the
// same name (nested too, and behind comments), a `const` without its initializer, a second
// declarator, a pattern, `let` as a name, a declaration after a statement's head or a label.
function declarations(seed) {
  let state = seed >>> 0;
  const random = (n) => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state % n;
  };
  const name = () => ["a", "b", "c", "$d"][random(4)];
  const kinds = [
    () => "let " + name() + " = 1;", () => "let " + name() + ";", () => "const " + name() + " = 1;",
    () => "const " + name() + ";", () => "class " + name() + " {}", () => "var " + name() + " = 1;",
    () => "function " + name() + "() {}", () => "function /* f */ " + name() + "() {}",
    () => "async function* " + name() + "() {}", () => "{ var " + name() + " = 2 }",
    () => "{ function " + name() + "() {} }", () => "if (1) const " + name() + " = 1;",
    () => "l: const " + name() + " = 1;", () => "let " + name() + " = 1, " + name() + " = 2;",
    () => "const " + name() + " = 1, " + name() + ";", () => "let [" + name() + "] = [1];",
    () => "const { " + name() + " } = {};", () => "let let = 1;", () => "f(" + name() + ", 1);",
    () => "const " + name() + "\n= 1", () => "x = { " + name() + ": 1 }",
  ];
  return () => {
    const n = 1 + random(4);
    const parts = [];
    for (let i = 0; i < n; i++) parts.push(kinds[random(kinds.length)]());
    return parts.join(random(2) === 0 ? " " : "\n");
  };
}

test("session declarations: a scan that does not compile the program makes none run", () => {
  const next = declarations(20261203);
  let answered = 0, valid = 0;
  for (let i = 0; i < 20000; i++) {
    const program = next();
    const text = rewrite.sessionDeclarations(program);
    if (compiles(text)) assert.ok(compiles(program), `${program}\nrewritten:\n${text}`);
    if (compiles(program)) {
      valid++;
      if (certain(program)) answered++;
    }
  }
  assert.ok(answered >= valid / 4, `the scan answered ${answered} of ${valid} valid programs without compiling`);
});

test("session declarations: common programs need no compiling to be scanned", () => {
  const common = [tricky[0], "const x = 1; let y = x + 1\nclass P { m() { return 1 } }",
    "import_ = 1; const total = [1, 2, 3].reduce((a, b) => a + b, 0); total",
    "function helper(v) { return v * 2 }\nconst doubled = helper(21); doubled"];
  for (const program of common) assert.ok(certain(program), program);
});

test("session declarations: the scan agrees with the parse on random programs", () => {
  const next = generator(20261202);
  let answered = 0;
  const programs = 3000;
  for (let i = 0; i < programs; i++) {
    // Declarations of every kind at the top level, after the generator's statements.
    const program = withoutAwait(next()) + "\nlet l" + i + " = " + i + "; class C" + i + " {} const k" + i + " = `${" + i + "}`";
    if (agree(program)) answered++;
  }
  assert.ok(answered >= programs * 0.95, `the scan answered ${answered} of ${programs}`);
});

// ---- The host's scan: the runner's answers, for daemon/src/sandbox/javascript/declarations.rs ---
//
// The daemon scans a session's program itself (the same scan in Rust) and answers where this
// scan answers without compiling. declaration-cases.json holds this scan's answers for the
// programs above, their prefixes (which end anywhere: in a string, a comment, a template, a
// regular expression) and others with characters outside ASCII; the Rust tests check the
// daemon's against it. `UPDATE_DECLARATION_CASES=1 node --test guest/javascript/tests/`
// writes it anew after program.js changes.

function hostAnswer(program) {
  if (!/\b(?:let|const|class)\b/.test(program)) return program;
  if (program.includes("<!--") || program.includes("-->") || program.startsWith("#!")) return null;
  const scan = new rewrite.Scan(program);
  if (!scan.run() || !scan.certain()) return null;
  return scan.edits.length === 0 ? program : rewrite.edited(program, scan.edits);
}

// Programs of random fragments: every kind of token, next to every other, where most of the
// scan's decisions are made (a keyword against `$` or `.`, a run that ends in `.` or holds a
// comma, a `/` after each kind of token, brackets that do not match).
function tokenSoup(seed) {
  let state = seed >>> 0;
  const random = (n) => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state % n;
  };
  const fragments = ["let ", "const ", "class ", "let", "const", "class", "x", "$", "$d", "a.b", ".", ",",
    " ", "\n", "\r\n", "(", ")", "{", "}", "[", "]", ";", "/", "/re/g", "'s'", '"t"', "`a`", "`${", "}`",
    "++", "--", "=", " = 1", "1", "1.", ".5", "if", "for", "while", "with", "in", "of", "await", "yield",
    "extends ", "function ", "var ", "//c\n", "/*c*/", "/*\n*/", "=>", "+", "-", "*", "?", ":", "!",
    "#", "@", "\\", "\t", "\u00e9", "\u2028", "A", "return ", "new ", "this", "true", "typeof ", "static"];
  return () => {
    const n = 2 + random(12);
    let program = "";
    for (let i = 0; i < n; i++) program += fragments[random(fragments.length)];
    return program;
  };
}

function hostCorpus() {
  const programs = new Set([...tricky, ...invalid]);
  const outsideAscii = ["const s = 'h\u00e9llo \u2028'; let t = s", "// \u00e9\nconst a = 1",
    "let x = `\u00e9${1}`; const y = /\u00e9/u", "const \u00e9 = 1", "let a = 1\u00a0", "let a = '\\\u2028'",
    "/* \u2028 */ let b = 2", "const c = 1 // \u2029 x", "let d = 1; x\u2028let e = 2",
    "x--\n/re/.test(1); let a = 1", "x++\n/re/.test(1); let a = 1", "let s = 'a\\\r\nb'; const t = s", "x++ / 2; let q = 1", "a--\n/ 2; let q = 1",
    "let u = \"\\\r\n\"; let v = u", "const w = `\\${x}`; let z = w", "let r = /[\\]/]/; const y = r"];
  for (const program of outsideAscii) programs.add(program);
  for (const program of [...tricky, ...outsideAscii]) {
    for (let end = 1; end < program.length; end += 2) programs.add(program.slice(0, end));
  }
  const next = declarations(20261204);
  for (let i = 0; i < 1200; i++) programs.add(next());
  const soup = tokenSoup(20261206);
  for (let i = 0; i < 3000; i++) programs.add(soup());
  const generate = generator(20261205);
  for (let i = 0; i < 300; i++) {
    programs.add(withoutAwait(generate()) + "\nlet l" + i + " = " + i + "; class C" + i + " {} const k = `${" + i + "}`");
  }
  return [...programs];
}

test("session declarations: declaration-cases.json holds the runner's answers", () => {
  const file = path.join(__dirname, "declaration-cases.json");
  const cases = hostCorpus().map((code) => ({ code, declared: hostAnswer(code) }));
  const text = "[\n" + cases.map((c) => JSON.stringify(c)).join(",\n") + "\n]\n";
  if (process.env.UPDATE_DECLARATION_CASES === "1") fs.writeFileSync(file, text);
  assert.equal(fs.readFileSync(file, "utf8"), text, "run with UPDATE_DECLARATION_CASES=1 to write it anew");
});
