// Loads the commands' script (dist/bin/commands.js, a CommonJS bundle) with a V8 code cache that
// holds every function the command ran, not only the ones compiled before it ran.
//
// Node's own compile cache is written as soon as a module is compiled, so it holds the top-level
// code and what V8 compiles eagerly: each function that runs is still compiled on its first call
// (in a one-task run, most of YAML's parser, zod's checks, commander and the runner), every
// start. A cache V8 makes after the command has run holds those too. It is kept per command
// (`run` and `pod-runner` share one) in a folder of this user's that no one else can write, named
// after the script's size and time, the Node version and the architecture, and V8 refuses a cache
// made by another version or other flags. A folder that is missing, someone else's or
// unwritable leaves the start as it was without a cache.
//
// Built-in modules are taken with process.getBuiltinModule: an import of node:fs into an ES
// module makes Node build its module facade, which reads every export of node:fs, the lazily
// loaded streams among them.
import type { Script } from "node:vm";

export interface LoadedScript<T> {
  exports: T;
  /** Writes the cache when the start had none or V8 refused it: call once the command has run. */
  saveCache: () => void;
}

/** This user's folder for the caches, created private; null if it is unsafe or cannot be had. */
function cacheFolder(): string | null {
  const { lstatSync, mkdirSync, statSync } = process.getBuiltinModule("node:fs");
  const { tmpdir } = process.getBuiltinModule("node:os");
  const path = process.getBuiltinModule("node:path");
  const uid = process.getuid?.();
  if (uid === undefined) return null;
  try {
    // As for Node's own cache (main.ts): creating a folder under a temporary folder that does not
    // exist can hang (TMPDIR=/proc/none), so only one that exists is used.
    if (!process.env.NODE_COMPILE_CACHE && !statSync(tmpdir(), { throwIfNoEntry: false })?.isDirectory()) {
      return null;
    }
    const base = process.env.NODE_COMPILE_CACHE || path.join(tmpdir(), "node-compile-cache");
    const folder = path.join(base, `playbook-${uid}`);
    mkdirSync(folder, { recursive: true, mode: 0o700 });
    const stat = lstatSync(folder);
    // Code from this folder runs: only a real folder of this user's that no one else can write.
    if (!stat.isDirectory() || stat.uid !== uid || (stat.mode & 0o022) !== 0) return null;
    return folder;
  } catch {
    return null;
  }
}

/** Runs the CommonJS script `file` and gives its exports; `kind` names the cache it uses. */
export function loadScript<T>(file: string, kind: string): LoadedScript<T> {
  const { closeSync, fstatSync, openSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } =
    process.getBuiltinModule("node:fs");
  const { createRequire } = process.getBuiltinModule("node:module");
  const path = process.getBuiltinModule("node:path");
  const vm = process.getBuiltinModule("node:vm");
  const fd = openSync(file, "r");
  let source: string;
  let stamp: string;
  try {
    const stat = fstatSync(fd);
    stamp = `${stat.size}-${Math.trunc(stat.mtimeMs)}`;
    source = readFileSync(fd, "utf8");
  } finally {
    closeSync(fd);
  }
  const folder = cacheFolder();
  const prefix = `${path.basename(file, ".js")}-${kind}-${process.version}-${process.arch}-`;
  const cacheFile = folder && path.join(folder, `${prefix}${stamp}.cache`);
  let cachedData: Buffer | undefined;
  if (cacheFile) {
    try {
      const cacheFd = openSync(cacheFile, "r");
      try {
        // The file itself too: one this user wrote, whatever happened to the folder since.
        const stat = fstatSync(cacheFd);
        if (stat.uid === process.getuid?.() && (stat.mode & 0o022) === 0) cachedData = readFileSync(cacheFd);
      } finally {
        closeSync(cacheFd);
      }
    } catch {
      // none yet
    }
  }
  const script: Script = new vm.Script(
    `(function (exports, require, module, __filename, __dirname) {${source}\n})`,
    {
      filename: file,
      cachedData,
      importModuleDynamically: vm.constants.USE_MAIN_CONTEXT_DEFAULT_LOADER,
    },
  );
  const module = { exports: {} as T };
  script.runInThisContext()(module.exports, createRequire(file), module, file, path.dirname(file));
  const fresh = cachedData === undefined || script.cachedDataRejected === true;
  return {
    exports: module.exports,
    saveCache: () => {
      if (!cacheFile || !folder || !fresh) return;
      try {
        const partial = `${cacheFile}.${process.pid}`;
        writeFileSync(partial, script.createCachedData(), { mode: 0o600 });
        renameSync(partial, cacheFile);
        // The caches of earlier builds of the script are of no more use.
        for (const name of readdirSync(folder)) {
          if (name.startsWith(prefix) && name.endsWith(".cache") && name !== path.basename(cacheFile)) {
            rmSync(path.join(folder, name), { force: true });
          }
        }
      } catch {
        // A cache that cannot be written leaves the next start as this one was.
      }
    },
  };
}
