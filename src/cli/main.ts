#!/usr/bin/env node
// The `playbook` command's entry. Most of a start is compiling some 200 modules, and every local
// run and every pod pays it: Node's module compile cache (in the temporary folder, or where
// NODE_COMPILE_CACHE says) keeps their compiled code between runs. It must be on before the
// program's modules load, so they are imported only after it. A cache that cannot be written
// leaves the start as it was.
import { statSync } from "node:fs";
import module from "node:module";
import { tmpdir } from "node:os";

// Node never returns from creating the cache folder in a temporary folder that does not exist
// under /proc (TMPDIR=/proc/none): only a folder that exists gets the cache.
if (process.env.NODE_COMPILE_CACHE || statSync(tmpdir(), { throwIfNoEntry: false })?.isDirectory()) {
  module.enableCompileCache?.();
}
await import("./program.js");
