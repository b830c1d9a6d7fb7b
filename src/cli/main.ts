#!/usr/bin/env node
// The `playbook` command's entry. It loads only what the command in argv needs: `--version` alone
// is answered here, before commander, zod and yaml are loaded; every other command loads the
// program, and the controller's modules load only when `playbook controller` runs.
//
// Most of a start is compiling modules, and every local run and every pod pays it: Node's module
// compile cache (in the temporary folder, or where NODE_COMPILE_CACHE says) keeps their compiled
// code between runs. It must be on before the program's modules load, so they are imported only
// after it. A cache that cannot be written leaves the start as it was.
import { statSync } from "node:fs";
import module from "node:module";
import { tmpdir } from "node:os";
import { packageVersion } from "./version.js";

const args = process.argv.slice(2);
if (args.length === 1 && (args[0] === "--version" || args[0] === "-V")) {
  // What commander prints for it, byte for byte.
  process.stdout.write(`${packageVersion()}\n`);
} else {
  // Node never returns from creating the cache folder in a temporary folder that does not exist
  // under /proc (TMPDIR=/proc/none): only a folder that exists gets the cache.
  if (process.env.NODE_COMPILE_CACHE || statSync(tmpdir(), { throwIfNoEntry: false })?.isDirectory()) {
    module.enableCompileCache?.();
  }
  const { runProgram } = await import("./program.js");
  process.exitCode = await runProgram(process.argv, packageVersion());
}
