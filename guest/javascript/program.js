// How the JavaScript runner turns a program's text into what it evaluates.
//
// A program is evaluated as a script by a direct `eval`, whose value is the program's completion
// value (ECMA-262: the value of the last statement that produced one, an `if`, loop, `switch`,
// `try` or `with` producing undefined when nothing in it did). A program with `await` at its
// top level is not a script: it runs as the body of an async function instead (asyncProgram),
// rewritten so that it still answers the value `eval` would give it. A session's programs keep
// their top-level declarations in the session's scope (sessionDeclarations, and the hoisting in
// asyncProgram).
//
// Loaded after web-apis.js (acorn's parser, as `vendor.parse`) and before runner.js, in one
// module; guest/javascript/tests/ runs it under Node against V8's own `eval`.

function parse(code) {
  try {
    return vendor.parse(code, { ecmaVersion: "latest", sourceType: "script", allowAwaitOutsideFunction: true });
  } catch (_) {
    return null;
  }
}

// `code` with `edits` ([start, end, replacement], in order, not overlapping) applied.
function edited(code, edits) {
  let text = "", at = 0;
  for (const [start, end, replacement] of edits) {
    text += code.slice(at, start) + replacement;
    at = end;
  }
  return text + code.slice(at);
}

// The names a declaration's pattern binds.
function boundNames(pattern, names) {
  switch (pattern.type) {
    case "Identifier": names.push(pattern.name); break;
    case "ObjectPattern":
      for (const p of pattern.properties) boundNames(p.type === "RestElement" ? p.argument : p.value, names);
      break;
    case "ArrayPattern": for (const e of pattern.elements) if (e !== null) boundNames(e, names); break;
    case "RestElement": boundNames(pattern.argument, names); break;
    case "AssignmentPattern": boundNames(pattern.left, names); break;
  }
  return names;
}

// Where a statement's text ends before its semicolon, if it has one.
function beforeSemicolon(code, node) {
  return code[node.end - 1] === ";" ? node.end - 1 : node.end;
}

// Whether a top-level statement declares names that a session keeps.
function isDeclaration(node) {
  return node.type === "VariableDeclaration" ||
    ((node.type === "FunctionDeclaration" || node.type === "ClassDeclaration") && node.id !== null);
}

// Edits that turn a top-level declaration of a program run as the body of an async function
// (see asyncProgram) into assignments to its names, which the session's scope declares: the
// declarations outlive the function. Adds the names to `names`.
function hoistDeclaration(code, node, edits, names) {
  if (node.type === "VariableDeclaration") {
    edits.push([node.start, node.start + node.kind.length, "void ("]);
    for (const d of node.declarations) {
      boundNames(d.id, names);
      if (d.init === null && node.kind !== "var") edits.push([d.id.end, d.id.end, " = undefined"]);
    }
    edits.push([beforeSemicolon(code, node), beforeSemicolon(code, node), ")"]);
  } else {
    names.push(node.id.name);
    edits.push([node.start, node.start, node.id.name + " = "], [node.end, node.end, ";"]);
  }
}

// ---- Completion values ----------------------------------------------------------------------
//
// The rewrite keeps the completion value in a variable, COMPLETION, the async function's
// parameter, which it returns at the end: every expression statement outside nested functions
// assigns its value to it, and every statement whose completion is undefined when its parts
// leave it empty (ECMA-262's UpdateEmpty(..., undefined): `if`, the loops, `switch`, `try`,
// `with`) first sets it to undefined, as does a `catch` block. A `finally` block's value counts
// only if the block ends abruptly (a `break` out of it): otherwise the value from before it is
// put back. Declarations, empty statements, `break` and `continue` leave it as it is, as they
// leave the completion value. Nothing inside an expression is touched.

const COMPLETION = "__hyperlightd_completion";
const FINALLY_SAVED = "__hyperlightd_before_finally";
const RESET = COMPLETION + " = void 0; ";

// Whether evaluating `node` starts from an undefined completion value.
function resetsCompletion(node) {
  switch (node.type) {
    case "IfStatement": case "ForStatement": case "ForInStatement": case "ForOfStatement":
    case "WhileStatement": case "DoWhileStatement": case "SwitchStatement": case "TryStatement":
    case "WithStatement":
      return true;
    case "LabeledStatement":
      return resetsCompletion(node.body);
    default:
      return false;
  }
}

// Pushes, in source order, the edits that make `node` record its completion value. `single`:
// the statement stands where the grammar takes one statement (an `if`'s branch, a loop's body),
// so that what goes before it must go into a block with it. A label's reset goes before the
// outermost label, so that `continue label` still names the loop.
function recordCompletion(code, node, edits, single) {
  if (!resetsCompletion(node)) {
    recordParts(code, node, edits);
    return;
  }
  edits.push([node.start, node.start, (single ? "{ " : "") + RESET]);
  recordParts(code, node, edits);
  if (single) edits.push([node.end, node.end, " }"]);
}

// The edits for the statements inside `node` (recordCompletion has done what goes before it).
function recordParts(code, node, edits) {
  switch (node.type) {
    case "ExpressionStatement": {
      const end = beforeSemicolon(code, node);
      // A statement without its semicolon gets one: after the closing parenthesis the next
      // line could otherwise continue it (`x++` then `(y)` on the next line).
      edits.push([node.start, node.start, COMPLETION + " = ("], [end, end, end === node.end ? ");" : ")"]);
      break;
    }
    case "BlockStatement":
      for (const statement of node.body) recordCompletion(code, statement, edits, false);
      break;
    case "IfStatement":
      recordCompletion(code, node.consequent, edits, true);
      if (node.alternate !== null) recordCompletion(code, node.alternate, edits, true);
      break;
    case "ForStatement": case "ForInStatement": case "ForOfStatement": case "WhileStatement":
    case "DoWhileStatement": case "WithStatement":
      recordCompletion(code, node.body, edits, true);
      break;
    case "LabeledStatement":
      recordParts(code, node.body, edits);
      break;
    case "SwitchStatement":
      for (const clause of node.cases) {
        for (const statement of clause.consequent) recordCompletion(code, statement, edits, false);
      }
      break;
    case "TryStatement":
      recordParts(code, node.block, edits);
      if (node.handler !== null) {
        const body = node.handler.body;
        edits.push([body.start + 1, body.start + 1, RESET]);
        recordParts(code, body, edits);
      }
      if (node.finalizer !== null) {
        const body = node.finalizer;
        edits.push([body.start + 1, body.start + 1, "const " + FINALLY_SAVED + " = " + COMPLETION + "; " + RESET]);
        recordParts(code, body, edits);
        edits.push([body.end - 1, body.end - 1, "; " + COMPLETION + " = " + FINALLY_SAVED + ";"]);
      }
      break;
  }
}

// The edits that keep the value of the program's directive prologue ('use strict' and the
// like, left as they are so that they stay directives): after the last of them, its value is
// recorded. Returns how many statements the prologue has.
function recordDirectives(code, body, edits) {
  let count = 0;
  while (count < body.length && body[count].directive !== undefined) count++;
  if (count > 0) {
    const last = body[count - 1];
    const value = code.slice(last.expression.start, last.expression.end);
    edits.push([last.end, last.end, "; " + COMPLETION + " = " + value + ";"]);
  }
  return count;
}

// `code`, which has `await` at its top level, as the body of an async arrow function whose
// result is the program's completion value: the text to evaluate, or null if the program does
// not parse even so. The arrow function starts on the program's first line, so that line
// numbers stay the program's. In a session (`persistent`), the program's top-level
// declarations are hoisted out of the function, into the session's scope.
function asyncProgram(code, persistent) {
  const ast = parse(code);
  if (ast === null) return null;
  const edits = [], names = [];
  const directives = recordDirectives(code, ast.body, edits);
  for (const node of ast.body.slice(directives)) {
    if (persistent && isDeclaration(node)) hoistDeclaration(code, node, edits, names);
    else recordCompletion(code, node, edits, false);
  }
  const declared = names.length > 0 ? "var " + names.join(", ") + "; " : "";
  return declared + "(async (" + COMPLETION + ") => {" + edited(code, edits) + "\n;return " + COMPLETION + ";\n})()";
}

// The program with its top-level `let`, `const` and `class` declarations made `var`s, which
// outlive its eval (a `let` or `const` would be local to it). A program that does not compile
// stays one that does not (the runner then evaluates it as it is, so that the eval reports
// why). A session's `const` can be assigned again in a later program, as in a notebook's later
// cell.
function sessionDeclarations(code) {
  const edits = scanDeclarations(code) ?? parsedDeclarations(code);
  return edits === null || edits.length === 0 ? code : edited(code, edits);
}

// sessionDeclarations' edits from acorn's tree; null when the program does not parse.
function parsedDeclarations(code) {
  const ast = parse(code);
  if (ast === null) return null;
  const edits = [];
  for (const node of ast.body) {
    if (node.type === "VariableDeclaration" && node.kind !== "var") {
      edits.push(declarationEdit(node.start, node.kind));
    } else if (node.type === "ClassDeclaration") {
      edits.push(...classEdits(node.start, node.end, node.id.name));
    }
  }
  return edits;
}

const declarationEdit = (start, kind) => [start, start + kind.length, kind === "const" ? "var  " : "var"];
const classEdits = (start, end, name) => [[start, start, "var " + name + " = "], [end, end, ";"]];

// ---- Top-level declarations from the tokens -------------------------------------------------
//
// acorn, run by QuickJS, takes about ten microseconds a character: for a short cell several
// times what running the cell takes, and a session's every program needs its declarations
// found. So they are found from the program's tokens, which QuickJS's native regular
// expressions read: a declaration is a `let`, `const` or `class` outside every bracket where a
// statement starts. The scan never makes a program that would fail run (`const x;` stays an
// error, as `let x; let x;` does): it answers for a program whose tokens show that the edits
// cannot (Scan.certain), or, failing that, one that QuickJS compiles (which costs about what
// running a short program does). It gives up (null) wherever a token alone does not say what it is: a `/` after `}`, `++`, `--` or
// a word that may be a name or a keyword (a regular expression or a division), a `let` after
// `)`, a declaration's keyword after `++`, `--` or a keyword, a class whose heritage is more
// than names, calls and members, an escape or a character outside ASCII between tokens,
// HTML-like comments. acorn decides then.
// tests/program.test.js checks the two against each other.

// A program's tokens, read by one match over the rest of its text: a line's end, comments,
// strings, templates without substitutions, the keywords the scan looks for (KEYWORD), `++` and
// `--`, and *runs* of everything between: spaces, names, numbers and the punctuators that are
// neither brackets nor `;` nor `/`, which the scan only looks into where it must (its end, and
// after a declaration's keyword). Any other character is a token alone: a bracket, `;`, and a
// `/` or a backtick that nothing before matched, which depends on what came before (the scan
// reads it with REGEX or TEMPLATE, then matches the rest again); one outside ASCII, a quote
// that no string closes or a backslash, at which the scan gives up.
const KEYWORD = String.raw`(?<![\w$.])(?:let|const|class|if|while|for|with)(?![\w$])`;
const STRING = String.raw`'(?:[^'\\\n\r]|\\(?:\r\n|[\s\S]))*'|"(?:[^"\\\n\r]|\\(?:\r\n|[\s\S]))*"`;
const TOKENS = new RegExp(String.raw`\r\n?|\n|\/\/[^\n\r\u2028\u2029]*|\/\*[\s\S]*?\*\/|` + STRING +
  String.raw`|` + "`" + String.raw`(?:[^` + "`" + String.raw`\\$]|\\[\s\S]|\$(?!\{))*` + "`" + "|" + KEYWORD +
  String.raw`|\+\+|--|(?:(?!` + KEYWORD + String.raw`)[\t\v\f !#%&*,.:<=>?@^|~\w$]|\+(?!\+)|-(?!-))+|[\s\S]`, "g");
// A run's own tokens.
const RUN_TOKENS = /[ \t\v\f]+|[A-Za-z_$][\w$]*|\.?\d[\w.]*|[\s\S]/g;
const REGEX = /\/(?:[^/\\[\n\r]|\\[^\n\r]|\[(?:[^\]\\\n\r]|\\[^\n\r])*\])+\/[A-Za-z]*/y;
// A template's text after its backtick or a substitution's closing brace, up to its end or its
// next substitution.
const TEMPLATE = /(?:[^`\\$]|\\[\s\S]|\$(?!\{))*(`|\$\{)/y;
const PUNCTUATORS = "()[]{};/";
// What a run ends with: a word or number, or a punctuator (a `.` may end a number: `1.`).
const RUN_END = /(?:([\w$]+)|(\S))[ \t\v\f]*$/;
const LINE_END = /[\n\r\u2028\u2029]/;
const isWordStart = (c) => (c >= 97 && c <= 122) || (c >= 65 && c <= 90) || c === 95 || c === 36;

// Reserved words, and the contextual ones: a declaration's keyword after one is left to the
// parse, and a `/` after one starts a regular expression, but after those that may be names.
const KEYWORDS = new Set(("await break case catch class const continue debugger default delete do else " +
  "enum export extends finally for function if import in instanceof let new of return static super " +
  "switch throw try typeof var void while with yield").split(" "));
const NAMES_TOO = new Set(["await", "let", "of", "static", "yield"]);
// Words that end an expression as a name does.
const VALUES = new Set(["true", "false", "null", "this"]);
// The keywords whose parenthesized head ends where a statement starts: `if (x) /re/` is a
// regular expression, `f(x) / 2` a division.
const HEADS = new Set(["if", "while", "for", "with"]);

function scanDeclarations(code) {
  if (!/\b(?:let|const|class)\b/.test(code)) return [];
  if (code.includes("<!--") || code.includes("-->") || code.startsWith("#!")) return null;
  const scan = new Scan(code);
  if (!scan.run()) return null;
  return scan.certain() || compiles(code) ? scan.edits : null;
}

// A name after `function` (and a `*`, spaces and comments): every function's, at any depth.
const FUNCTION_NAME = /\bfunction\b(?:[\s*]|\/\*[\s\S]*?\*\/|\/\/[^\n\r]*)*([\w$]+)/g;

// The constructor as the runtime made it, whatever a session's program does to `Function`.
const FunctionConstructor = Function;

// Whether QuickJS compiles `code` (as a function's body: a script's grammar but for `return`,
// which the eval refuses anyway).
function compiles(code) {
  try {
    new FunctionConstructor(code);
    return true;
  } catch (_) {
    return false;
  }
}

class Scan {
  constructor(code) {
    this.code = code;
    // Where the token being read starts.
    this.at = 0;
    this.edits = [];
    // Open brackets, innermost last: "(", "if(" (a statement's head), "[", "{", "${" (a
    // template's substitution) or a class declaration's body ({class: start, name}).
    this.open = [];
    // The last token: {kind: "word" | "name" | "value" | "punctuator", text, head?}; null at
    // the start. `head`: a `)` that closes a statement's head.
    this.last = null;
    // Whether a line ends between the last token and this one.
    this.newline = false;
    // A declaration being read: {keyword: "let", start} until the token after `let` says;
    // {keyword: "const", start, name?} until the token after its name; {keyword: "class",
    // start, name?, heritage?} until its body opens.
    this.pending = null;
    // The names the edited declarations declare, when each declares one name (see certain).
    this.names = [];
    // Whether the tokens leave open an early error that the edits would take away.
    this.uncertain = false;
  }

  // Whether the edits cannot make a program that does not compile compile, so that it need not
  // be compiled to know (compiling costs about as much as running a short program): none of the
  // early errors that a `let`, `const` or `class` has and a `var` does not (ECMA-262 14.3.1.1,
  // 16.1.1) can be in it. Each edited declaration declares one name, a `const` with its
  // initializer (no top-level comma, so no second declarator; no pattern, whose names the scan
  // does not read; not `let` or another word), the names differ, none is a function's (a
  // top-level function's is var-declared), and no `var` is anywhere; and each declaration
  // was where a statement starts for certain (not after a statement's head: `if (a) const b =
  // 1`).
  certain() {
    if (this.uncertain || /\bvar\b/.test(this.code)) return false;
    const names = new Set(this.names);
    if (names.size !== this.names.length) return false;
    for (const match of this.code.matchAll(FUNCTION_NAME)) {
      if (names.has(match[1])) return false;
    }
    return true;
  }

  // Reads every token; false to give up.
  run() {
    while (this.at < this.code.length) {
      const tokens = this.code.slice(this.at).match(TOKENS);
      for (const text of tokens) {
        const token = this.token(text);
        if (token === null) return false;
        if (token === RESYNC) break;
        if (token === RAN) this.newline = false;
        else if (token !== SPACE && !this.take(token)) return false;
      }
    }
    return this.open.length === 0 && this.pending === null;
  }

  // Takes `token` as the last one, following a declaration through it; false to give up.
  take(token) {
    if (!this.declaration(token)) return false;
    this.last = token;
    this.newline = false;
    return true;
  }

  // The token `text` at `at`, after which `at` is; SPACE for a space or comment; RAN for a run
  // (see stretch); RESYNC when it was read with a pattern of its own (`at` is after it, the
  // rest must be matched again); null to give up.
  token(text) {
    const start = this.at;
    this.at += text.length;
    const c = text.charCodeAt(0);
    if (c === 10 || c === 13) {
      this.newline = true;
      return SPACE;
    }
    if (text.length > 1) {
      const second = text.charCodeAt(1);
      if (c === 47 && (second === 47 || second === 42)) { // A comment.
        if (second === 42 && LINE_END.test(text)) this.newline = true;
        return SPACE;
      }
      if (c === 39 || c === 34 || c === 96) return { kind: "value", text: text[0] }; // A string, a template.
      if ((c === 43 || c === 45) && text === (c === 43 ? "++" : "--")) return { kind: "punctuator", text };
    }
    if (isWordStart(c) && KEYWORDS.has(text)) return { kind: "word", text };
    if (PUNCTUATORS.includes(text)) {
      if (c === 47) return this.slash(start);
      return this.bracket(text);
    }
    if (c === 96) return this.template(start + 1); // A backtick alone: a template with substitutions.
    if (c === 39 || c === 34 || c === 92 || c > 126) return null;
    return this.stretch(text);
  }

  // A run: nothing in it opens or closes; what it ends with is the last token, unless a
  // declaration being read must see its tokens. RAN, or SPACE for spaces alone.
  stretch(text) {
    if (this.open.length === 0 && text.includes(",")) this.uncertain = true;
    if (this.pending !== null) {
      for (const part of text.match(RUN_TOKENS)) {
        const token = runToken(part);
        if (token === null) return null;
        if (token !== SPACE && !this.take(token)) return null;
      }
      return RAN;
    }
    const end = RUN_END.exec(text);
    if (end === null) return SPACE; // Spaces alone.
    if (end[2] === ".") return null;
    this.last = end[1] !== undefined ? wordToken(end[1]) : { kind: "punctuator", text: end[2] };
    return RAN;
  }

  // Takes `token`, the first after a declaration's keyword, as the name it declares: false,
  // and the scan uncertain, when it is not one name (a pattern, a word).
  declares(token) {
    if (token.kind === "name") {
      this.names.push(token.text);
      return true;
    }
    this.uncertain = true;
    return false;
  }

  // A punctuator, with the bracket it opens or closes.
  bracket(text) {
    if (text === "(") this.open.push(this.last !== null && HEADS.has(this.last.text) ? "if(" : "(");
    if (text === "[" || text === "{") this.open.push(text);
    if (text === "]" && this.open.pop() !== "[") return null;
    if (text === ")") {
      const closed = this.open.pop();
      if (closed !== "(" && closed !== "if(") return null;
      return { kind: "punctuator", text, head: closed === "if(" };
    }
    if (text === "}") {
      const closed = this.open.pop();
      if (closed === "${") return this.template(this.at);
      if (typeof closed === "object" && closed !== null) {
        this.edits.push(...classEdits(closed.class, this.at, closed.name));
      } else if (closed !== "{") {
        return null;
      }
    }
    return { kind: "punctuator", text };
  }

  // Reads with `pattern` from `from`; the match, `at` after it, or null.
  read(pattern, from) {
    pattern.lastIndex = from;
    const found = pattern.exec(this.code);
    if (found !== null) this.at = pattern.lastIndex;
    return found;
  }

  // A template's text from `from` (after its backtick or a substitution's closing brace), to
  // its end or its next substitution.
  template(from) {
    const chunk = this.read(TEMPLATE, from);
    if (chunk === null) return null;
    if (chunk[1] === "`") return this.resynced({ kind: "value", text: "`" });
    this.open.push("${");
    return this.resynced({ kind: "punctuator", text: "${" });
  }

  // A `/` at `from`: a regular expression where an expression may start, a division where one
  // ended.
  slash(from) {
    const last = this.last;
    let regex;
    if (last === null) regex = true;
    else if (last.kind === "word") {
      if (NAMES_TOO.has(last.text)) return null;
      regex = true;
    } else if (last.kind === "name" || last.kind === "value") regex = false;
    else if (last.text === ")") regex = last.head;
    else if (["}", "++", "--"].includes(last.text)) return null;
    else regex = last.text !== "]";
    if (!regex) return { kind: "punctuator", text: "/" };
    return this.read(REGEX, from) === null ? null : this.resynced({ kind: "value", text: "/" });
  }

  // `token`, read with a pattern of its own: taken as the last token, and the rest is matched
  // again from after it.
  resynced(token) {
    return this.take(token) ? RESYNC : null;
  }

  // Whether a statement may start at `token` (which is outside every bracket): null when the
  // token before does not say.
  startsStatement() {
    const last = this.last;
    if (last === null) return true;
    if (last.kind === "word" || last.text === "++" || last.text === "--") return null;
    if (last.text === ";" || last.text === "}") return true;
    if (last.text === ")") return null;
    if (last.kind === "punctuator" && last.text !== "]") return false;
    return this.newline;
  }

  // Follows `token` through a top-level declaration; false to give up.
  declaration(token) {
    const pending = this.pending;
    if (pending !== null) return this.pendingDeclaration(pending, token);
    if (this.open.length !== 0 || token.kind !== "word") return true;
    if (token.text !== "let" && token.text !== "const" && token.text !== "class") return true;
    const starts = this.startsStatement();
    if (starts === null && (token.text === "let" || this.last.kind === "word" || this.last.text !== ")")) {
      return false;
    }
    if (starts === false) return true;
    if (starts === null) this.uncertain = true;
    const start = this.at - token.text.length;
    if (token.text === "const") this.edits.push(declarationEdit(start, "const"));
    this.pending = { keyword: token.text, start };
    return true;
  }

  pendingDeclaration(pending, token) {
    if (pending.keyword === "let") {
      this.pending = null;
      if (token.text === "in" || token.text === "instanceof") return false;
      // The `[` or `{` was pushed as opened: a pattern, as the grammar takes it after `let`.
      if (token.kind === "name" || token.kind === "word" || token.text === "[" || token.text === "{") {
        this.edits.push(declarationEdit(pending.start, "let"));
        this.declares(token);
      }
      return true;
    }
    if (pending.keyword === "const") {
      // Edited already: read on only to know whether it has its initializer.
      if (pending.name === undefined && this.declares(token)) {
        pending.name = token.text;
        return true;
      }
      this.pending = null;
      if (pending.name === undefined || token.text !== "=") this.uncertain = true;
      return true;
    }
    if (pending.name === undefined) {
      if (token.kind !== "name") return false;
      pending.name = token.text;
      this.names.push(pending.name);
      return true;
    }
    if (token.text === "extends" && pending.heritage === undefined) {
      pending.heritage = true;
      return true;
    }
    const depth = this.open.length;
    if (token.text === "{" && depth === 1) {
      // Its body: the class ends where this brace closes.
      this.open[0] = { class: pending.start, name: pending.name };
      this.pending = null;
      return true;
    }
    // A heritage of names, calls and members: anything else is the parse's to read.
    return pending.heritage === true && (depth > 0 || token.kind === "name" ||
      token.text === "." || token.text === "?" || token.text === ")" || token.text === "]");
  }
}

// A token of a run (RUN_TOKENS): null for one the scan does not take.
function runToken(text) {
  const c = text.charCodeAt(0);
  if (c === 32 || c === 9 || c === 11 || c === 12) return SPACE;
  if (isWordStart(c) || (c >= 48 && c <= 57) || (c === 46 && text.length > 1)) return wordToken(text);
  return c > 126 ? null : { kind: "punctuator", text };
}

// A word or a number, as a token.
function wordToken(text) {
  const c = text.charCodeAt(0);
  if (c >= 48 && c <= 57 || c === 46) return { kind: "value", text: "0" };
  return { kind: KEYWORDS.has(text) ? "word" : VALUES.has(text) ? "value" : "name", text };
}

const SPACE = { kind: "space" };
const RESYNC = { kind: "resync" };
const RAN = { kind: "run" };
