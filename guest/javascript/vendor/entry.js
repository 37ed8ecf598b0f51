// The web APIs the JavaScript guest takes from npm rather than writing them again, bundled by
// `cargo xtask js-vendor` (esbuild) into web-apis.js, which the daemon compiles in ahead of the
// runner. Each installs itself on globalThis where QuickJS lacks it; acorn's parser is what
// the runner rewrites a program with top-level `await` with.
import "core-js/actual/url";
import "core-js/actual/url-search-params";
import "core-js/actual/structured-clone";
import "core-js/actual/dom-exception";
import "core-js/actual/queue-microtask";
import "core-js/actual/atob";
import "core-js/actual/btoa";
import "fast-text-encoding";
export { parse } from "acorn";
