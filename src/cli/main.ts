#!/usr/bin/env node
// The `playbook` command's entry. Most of a start is compiling some 200 modules, and every local
// run and every pod pays it: Node's module compile cache (in the temporary folder, or where
// NODE_COMPILE_CACHE says) keeps their compiled code between runs. It must be on before the
// program's modules load, so they are imported only after it. A cache that cannot be written
// leaves the start as it was.
import module from "node:module";

module.enableCompileCache?.();
await import("./program.js");
