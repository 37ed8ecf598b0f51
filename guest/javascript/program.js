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
// outlive its eval (a `let` or `const` would be local to it); unchanged when it does not parse,
// so that the eval reports why. A session's `const` can be assigned again in a later program,
// as in a notebook's later cell.
function sessionDeclarations(code) {
  const ast = parse(code);
  if (ast === null) return code;
  const edits = [];
  for (const node of ast.body) {
    if (node.type === "VariableDeclaration" && node.kind !== "var") {
      edits.push([node.start, node.start + node.kind.length, node.kind === "const" ? "var  " : "var"]);
    } else if (node.type === "ClassDeclaration") {
      edits.push([node.start, node.start, "var " + node.id.name + " = "], [node.end, node.end, ";"]);
    }
  }
  return edits.length === 0 ? code : edited(code, edits);
}
