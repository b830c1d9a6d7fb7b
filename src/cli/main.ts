#!/usr/bin/env node
// The `playbook` command's entry. It loads only what the command in argv needs: `--version` alone
// is answered here, before commander, zod and yaml are loaded; run, validate and pod-runner load
// the commands' script (commands.js) with a code cache of everything they ran (code-cache.ts),
// and the cluster commands (submit, wait, cancel, logs, describe, cron) the cluster commands' script
// (cluster-commands.js) likewise; anything else (help, the controller, a mistyped command) loads
// the program's modules, and the controller's modules load only when `playbook controller` runs.
//
// Most of a start is compiling modules, and every local run and every pod pays it: Node's module
// compile cache (in this user's private cache folder beside the script's, see code-cache.ts, or
// where NODE_COMPILE_CACHE says) keeps their compiled code between runs. It must be on before the
// program's modules load, so they are imported only after it. A cache that cannot be had leaves
// the start as it was.
// (Built-in modules through process.getBuiltinModule: see code-cache.ts.)
import { loadScript, privateCacheFolder } from "./code-cache.js";
import { packageVersion } from "./version.js";

/**
 * The commands' scripts beside the bundle's entry (scripts/bundle-cli.ts defines them); tsc's
 * build, dist/src/cli/main.js, has none and loads the program's modules for every command.
 */
declare const __PLAYBOOK_COMMANDS_SCRIPT__: string | undefined;
declare const __PLAYBOOK_CLUSTER_COMMANDS_SCRIPT__: string | undefined;
const COMMANDS_SCRIPT =
  typeof __PLAYBOOK_COMMANDS_SCRIPT__ === "string" ? __PLAYBOOK_COMMANDS_SCRIPT__ : undefined;
const CLUSTER_COMMANDS_SCRIPT =
  typeof __PLAYBOOK_CLUSTER_COMMANDS_SCRIPT__ === "string" ? __PLAYBOOK_CLUSTER_COMMANDS_SCRIPT__ : undefined;

/**
 * The script and code cache each command starts from: the commands' script serves the local
 * commands (one cache shared by those that run tasks), the cluster commands' script the commands
 * that talk to a cluster.
 */
const SCRIPTS: Record<string, { script: string | undefined; cache: string }> = {
  run: { script: COMMANDS_SCRIPT, cache: "run" },
  "pod-runner": { script: COMMANDS_SCRIPT, cache: "run" },
  validate: { script: COMMANDS_SCRIPT, cache: "validate" },
  submit: { script: CLUSTER_COMMANDS_SCRIPT, cache: "submit" },
  wait: { script: CLUSTER_COMMANDS_SCRIPT, cache: "follow" },
  cancel: { script: CLUSTER_COMMANDS_SCRIPT, cache: "follow" },
  logs: { script: CLUSTER_COMMANDS_SCRIPT, cache: "follow" },
  describe: { script: CLUSTER_COMMANDS_SCRIPT, cache: "follow" },
  cron: { script: CLUSTER_COMMANDS_SCRIPT, cache: "follow" },
};

const args = process.argv.slice(2);
const start =
  args[0] === undefined ? undefined : Object.hasOwn(SCRIPTS, args[0]) ? SCRIPTS[args[0]] : undefined;
if (args.length === 1 && (args[0] === "--version" || args[0] === "-V")) {
  // What commander prints for it, byte for byte.
  process.stdout.write(`${packageVersion()}\n`);
} else if (start?.script !== undefined && !args.includes("controller")) {
  const script = loadScript<typeof import("./commands.js")>(
    process.getBuiltinModule("node:path").join(import.meta.dirname, start.script),
    start.cache,
  );
  const code = await script.exports.runProgram(process.argv, packageVersion());
  process.exitCode = code;
  // Only from a command that did its work, whatever its outcome (exit-codes.ts): a cache made by
  // a refused one (2, invalid input) would lack most of it.
  if (code !== 2) script.saveCache();
  // The command is over: its tasks' processes are gone and what they printed was handed to stdout
  // (src/pod-runner/session.ts waits for that). When stdout and stderr hold nothing either,
  // exiting now spares tearing the process down, some milliseconds of every run; otherwise it
  // ends once they are out.
  if (process.stdout.writableLength === 0 && process.stderr.writableLength === 0) process.exit(code);
} else {
  // NODE_COMPILE_CACHE, when set, has Node's cache on already. Otherwise not in the temporary
  // folder, which every user shares: one user could turn it off for all (a file where its folder
  // goes) or fill it for others.
  if (!process.env.NODE_COMPILE_CACHE) {
    const folder = privateCacheFolder();
    if (folder !== null) {
      process
        .getBuiltinModule("node:module")
        .enableCompileCache?.(process.getBuiltinModule("node:path").join(folder, "node"));
    }
  }
  const { runProgram } = await import("./program.js");
  process.exitCode = await runProgram(process.argv, packageVersion());
}
