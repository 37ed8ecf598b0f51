const p = Promise.resolve(42)
await p
