// E2B's own JavaScript SDK (`@e2b/code-interpreter`, pinned in package.json), unmodified,
// against `hlctl e2b-gateway` in front of the daemon: only the environment (E2B_API_URL,
// E2B_SANDBOX_URL, E2B_API_KEY) says where E2B is. The programs are those of E2B's
// documentation for the code interpreter. Run by tests/tests/python_sdk.rs with node's test
// runner, from target/e2b-js where `cargo xtask test` installs the SDK.

import assert from "node:assert/strict";
import { test } from "node:test";

import { AuthenticationError, Sandbox, SandboxError, TimeoutError } from "@e2b/code-interpreter";

test("state carries over, output streams, errors and languages come back as E2B says", async () => {
  const sandbox = await Sandbox.create();
  try {
    await sandbox.runCode("x = 1");
    const execution = await sandbox.runCode("x+=1; x");
    assert.equal(execution.text, "2");
    assert.ok(execution.results[0].isMainResult);

    const seen = [];
    const printed = await sandbox.runCode("for i in range(3):\n    print(i)", {
      onStdout: (message) => seen.push(message.line),
    });
    assert.equal(seen.join(""), "0\n1\n2\n");
    assert.equal(printed.logs.stdout.join(""), "0\n1\n2\n");

    const failed = await sandbox.runCode("undefined_name");
    assert.equal(failed.error?.name, "NameError");
    assert.match(failed.error.value, /undefined_name/);

    const js = await sandbox.runCode("const a = 40; a + 2", { language: "js" });
    assert.equal(js.text, "42");
    const again = await sandbox.runCode("a - 2", { language: "javascript" });
    assert.equal(again.text, "38", "the JavaScript context keeps its state");

    const context = await sandbox.createCodeContext({ language: "python" });
    await sandbox.runCode("x = 100", { context });
    assert.equal((await sandbox.runCode("x")).text, "2", "a context has its own state");
    assert.equal((await sandbox.runCode("x", { context })).text, "100");
    await sandbox.restartCodeContext(context);
    assert.equal((await sandbox.runCode("'x' in globals()", { context })).text, "False");
    const ids = (await sandbox.listCodeContexts()).map((c) => c.id);
    assert.ok(ids.includes(sandbox.sandboxId) && ids.includes(context.id), ids);
    await sandbox.removeCodeContext(context);
    assert.ok(!(await sandbox.listCodeContexts()).some((c) => c.id === context.id));
  } finally {
    await sandbox.kill();
  }
});

test("envs of the sandbox and of a run are what programs see", async () => {
  const sandbox = await Sandbox.create({ envs: { MODE: "sandbox" } });
  try {
    const read = "import os\n[os.environ.get(n) for n in ('MODE', 'ONLY')]";
    assert.equal((await sandbox.runCode(read)).text, "['sandbox', None]");
    const own = await sandbox.runCode(read, { envs: { MODE: "run", ONLY: "1" } });
    assert.equal(own.text, "['run', '1']");
    assert.equal((await sandbox.runCode(read)).text, "['sandbox', None]");
    const js = await sandbox.runCode("process.env.MODE", { language: "js" });
    assert.equal(js.text, "sandbox");
  } finally {
    await sandbox.kill();
  }
});

test("files are written, read, listed, renamed and removed where programs see them", async () => {
  const sandbox = await Sandbox.create();
  try {
    const written = await sandbox.files.write("/home/user/data.csv", "n\n1\n2\n");
    assert.equal(written.path, "/home/user/data.csv");
    assert.equal(await sandbox.files.read("/home/user/data.csv"), "n\n1\n2\n");
    await sandbox.files.write("in/a.bin", new Uint8Array([0, 255]));
    const bytes = await sandbox.files.read("in/a.bin", { format: "bytes" });
    assert.deepEqual([...bytes], [0, 255]);
    const listed = (await sandbox.files.list("/home/user")).map((e) => [e.name, e.type]);
    assert.deepEqual(listed, [["data.csv", "file"], ["in", "dir"]]);
    assert.ok(await sandbox.files.exists("in/a.bin"));
    assert.ok(!(await sandbox.files.exists("nope.txt")));

    const total = await sandbox.runCode(
      "import csv\nsum(int(r['n']) for r in csv.DictReader(open('data.csv')))",
    );
    assert.equal(total.text, "3");
    await sandbox.runCode("open('out.txt', 'w').write('from the program')");
    assert.equal(await sandbox.files.read("out.txt"), "from the program");

    await sandbox.files.rename("out.txt", "/home/user/moved.txt");
    await sandbox.files.remove("/home/user/in");
    const names = (await sandbox.files.list("/home/user")).map((e) => e.name);
    assert.deepEqual(names, ["data.csv", "moved.txt"]);
    await assert.rejects(sandbox.files.read("in/a.bin"), SandboxError);
  } finally {
    await sandbox.kill();
  }
});

test("sandboxes are listed, described, paused, connected to and killed", async () => {
  const sandbox = await Sandbox.create({ metadata: { user: "ana" }, timeoutMs: 60_000 });
  await sandbox.runCode("kept = 41");
  await sandbox.setTimeout(120_000);
  const listed = await Sandbox.list().nextItems();
  assert.ok(listed.some((s) => s.sandboxId === sandbox.sandboxId));
  const info = await sandbox.getInfo();
  assert.deepEqual(info.metadata, { user: "ana" });
  assert.ok(await sandbox.isRunning());

  assert.equal(await sandbox.pause(), true);
  assert.equal((await sandbox.getInfo()).state, "paused");
  const same = await Sandbox.connect(sandbox.sandboxId);
  assert.equal((await same.runCode("kept + 1")).text, "42");

  assert.equal(await Sandbox.kill(sandbox.sandboxId), true);
  assert.equal(await Sandbox.kill(sandbox.sandboxId), false, "a killed sandbox is not found");
});

test("a run past its timeout raises the SDK's error, and what cannot be done says why", async () => {
  const sandbox = await Sandbox.create();
  try {
    await sandbox.runCode("x = 1");
    // The SDK's timeoutMs counts from the answer's head, which comes when the program starts
    // (with no request timeout, an answer begun only at the program's end would resolve with
    // the daemon's own timeout instead of rejecting).
    const spin = "while True:\n    pass";
    await assert.rejects(sandbox.runCode(spin, { timeoutMs: 3000, requestTimeoutMs: 0 }), TimeoutError);
    assert.equal((await sandbox.runCode("x + 1")).text, "2", "the state as the last run left it");
    await assert.rejects(sandbox.commands.run("ls"), (error) => {
      assert.ok(error instanceof SandboxError, String(error));
      assert.match(error.message, /run_code/);
      return true;
    });
  } finally {
    await sandbox.kill();
  }
  await assert.rejects(Sandbox.create({ apiKey: "e2b_not_the_key_0000000000000000" }), AuthenticationError);
});
