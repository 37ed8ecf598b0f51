// The web APIs the JavaScript guest takes from npm rather than writing them again, bundled by
// `cargo xtask js-vendor` (esbuild) into web-apis.js, which the daemon compiles in ahead of the
// runner as `var vendor = {...}`; web.js puts on globalThis what QuickJS lacks. core-js-pure
// rather than core-js: core-js installs its polyfills globally and may replace built-ins it
// judges non-conforming; core-js-pure leaves QuickJS's own as they are. acorn's parser is what
// the runner rewrites a program with top-level `await` with.
import "fast-text-encoding"; // Sets TextEncoder and TextDecoder on globalThis if missing.
export { default as URL } from "core-js-pure/actual/url/index.js";
export { default as URLSearchParams } from "core-js-pure/actual/url-search-params/index.js";
export { default as structuredClone } from "core-js-pure/actual/structured-clone.js";
export { default as DOMException } from "core-js-pure/actual/dom-exception/index.js";
export { default as queueMicrotask } from "core-js-pure/actual/queue-microtask.js";
export { default as atob } from "core-js-pure/actual/atob.js";
export { default as btoa } from "core-js-pure/actual/btoa.js";
export { parse } from "acorn";
