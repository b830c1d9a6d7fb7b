// Loads the commands' script (dist/bin/commands.js, a CommonJS bundle) with a V8 code cache that
// holds every function the command ran, not only the ones compiled before it ran.
//
// Node's own compile cache is written as soon as a module is compiled, so it holds the top-level
// code and what V8 compiles eagerly: each function that runs is still compiled on its first call
// (in a one-task run, most of YAML's parser, zod's checks, commander and the runner), every
// start. A cache V8 makes after the command has run holds those too. It is kept per command
// (`run` and `pod-runner` share one).
//
// The cache is keyed by the script's content: the build writes the SHA-256 of the script on its
// last line (scripts/bundle-cli.ts), so an upgrade never runs the bytecode of the code it
// replaced. V8 checks only the source's length, and npm gives every file it installs the same
// time, so neither size nor mtime can tell two builds apart. A script without that line gets no
// cache.
//
// Code read from the cache runs, so it lives where only this user can write: this user's cache
// folder ($XDG_CACHE_HOME or ~/.cache), playbook-controller/code-cache. The folder and every
// folder above it must be owned by this user or root and writable by no one else (a sticky
// folder of root's such as /tmp excepted); files are read and written without following a
// symlink, and written under a fresh name created exclusively, then renamed into place.
// Anything else leaves the start as it was, without a cache; NODE_DEBUG=playbook says why. Nothing
// another user can create turns it off: the folder is under this user's home or XDG_CACHE_HOME.
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

/** The line the build ends the script with: its key in the cache. */
const KEY_LINE = /\n\/\/ code-cache-key: sha256-([0-9a-f]{64})\n?$/;

/** `NODE_DEBUG=playbook` (as Node's own debug logs): why a start had no cache. */
export function debugNote(message: string): void {
  if (/(^|,)\s*playbook\s*(,|$)/i.test(process.env.NODE_DEBUG ?? "")) {
    process.stderr.write(`PLAYBOOK ${process.pid}: code cache: ${message}\n`);
  }
}

/**
 * Why `stat` (a folder on the path to the cache) cannot be trusted, or null when it can: another
 * user who owns it, or may write to it, could put code of theirs where this user's would be read.
 */
function untrusted(stat: import("node:fs").Stats, uid: number, own: boolean): string | null {
  if (!stat.isDirectory()) return "not a folder";
  if (stat.uid !== uid && (own || stat.uid !== 0)) return `owned by uid ${stat.uid}`;
  // Writable by others: only a sticky folder of root's (/tmp), where no one can rename or remove
  // what another user owns, and never one of the cache's own folders.
  if ((stat.mode & 0o022) !== 0 && (own || stat.uid !== 0 || (stat.mode & 0o1000) === 0)) {
    return `writable by ${stat.mode & 0o020 ? "its group" : "others"} (mode ${(stat.mode & 0o7777).toString(8)})`;
  }
  return null;
}

/**
 * This user's private cache folder (created if missing), or null with a debug note when it is
 * unsafe or cannot be had. `$XDG_CACHE_HOME` (if absolute) or `~/.cache`, then
 * playbook-controller/code-cache.
 */
export function privateCacheFolder(): string | null {
  const { lstatSync, mkdirSync, realpathSync } = process.getBuiltinModule("node:fs");
  const path = process.getBuiltinModule("node:path");
  const uid = process.getuid?.();
  if (uid === undefined) return null;
  const xdg = process.env.XDG_CACHE_HOME;
  const home = process.env.HOME;
  const base =
    xdg && path.isAbsolute(xdg) ? xdg : home && path.isAbsolute(home) ? path.join(home, ".cache") : null;
  if (base === null) {
    debugNote("not used: neither XDG_CACHE_HOME nor HOME is an absolute path");
    return null;
  }
  let at = base;
  try {
    // The user's cache folder may itself be a symlink the user made (to another disk): resolved,
    // then every folder from / down is checked. Below it, the cache's own folders are never
    // symlinks and are created here, private.
    mkdirOwn(base);
    at = realpathSync(base);
    for (let dir = at; ; dir = path.dirname(dir)) {
      const why = untrusted(lstatSync(dir), uid, false);
      if (why !== null) {
        debugNote(`not used: ${dir} is ${why}`);
        return null;
      }
      if (path.dirname(dir) === dir) break;
    }
    for (const name of ["playbook-controller", "code-cache"]) {
      at = path.join(at, name);
      mkdirOwn(at);
      const why = untrusted(lstatSync(at), uid, true);
      if (why !== null) {
        debugNote(`not used: ${at} is ${why}`);
        return null;
      }
    }
    return at;
  } catch (error) {
    debugNote(`not used: ${at}: ${(error as Error).message}`);
    return null;
  }

  /** One folder, private, unless something is there already (checked by the caller). */
  function mkdirOwn(dir: string): void {
    try {
      // Not recursive: Node's recursive mkdir never returns under /proc (HOME=/proc/none).
      mkdirSync(dir, { mode: 0o700 });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
    }
  }
}

/** Runs the CommonJS script `file` and gives its exports; `kind` names the cache it uses. */
export function loadScript<T>(file: string, kind: string): LoadedScript<T> {
  const {
    closeSync,
    constants,
    fstatSync,
    openSync,
    readdirSync,
    readFileSync,
    renameSync,
    rmSync,
    writeSync,
  } = process.getBuiltinModule("node:fs");
  const { createRequire } = process.getBuiltinModule("node:module");
  const path = process.getBuiltinModule("node:path");
  const vm = process.getBuiltinModule("node:vm");
  const fd = openSync(file, "r");
  let bytes: Buffer;
  try {
    bytes = readFileSync(fd);
  } finally {
    closeSync(fd);
  }
  // The build writes the scripts in ASCII (non-ASCII escaped): read so, the text is the bytes as
  // they are, some 10 ms sooner than decoding UTF-8 for a megabyte.
  const source = process.getBuiltinModule("node:buffer").isAscii(bytes)
    ? bytes.toString("latin1")
    : bytes.toString("utf8");
  const key = KEY_LINE.exec(source.slice(-120))?.[1];
  if (key === undefined)
    debugNote(`not used: ${file} has no code-cache-key line (not built by npm run build)`);
  const folder = key === undefined ? null : privateCacheFolder();
  const prefix = `${path.basename(file, ".js")}-${kind}-${process.version}-${process.arch}-`;
  const cacheFile = folder && path.join(folder, `${prefix}${key}.cache`);
  let cachedData: Buffer | undefined;
  if (cacheFile) {
    try {
      // Never through a symlink: an open of one fails (ELOOP) and the start goes on without.
      const cacheFd = openSync(cacheFile, constants.O_RDONLY | constants.O_NOFOLLOW);
      try {
        // The file itself too: one this user wrote, whatever happened to the folder since.
        const stat = fstatSync(cacheFd);
        if (stat.isFile() && stat.uid === process.getuid?.() && (stat.mode & 0o022) === 0) {
          cachedData = readFileSync(cacheFd);
        } else {
          debugNote(`not used: ${cacheFile} is not a private file of this user's`);
        }
      } finally {
        closeSync(cacheFd);
      }
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code !== "ENOENT") debugNote(`not used: ${cacheFile}: ${code ?? (error as Error).message}`);
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
  if (cachedData !== undefined) {
    debugNote(script.cachedDataRejected ? `rejected by V8: ${cacheFile}` : `used ${cacheFile}`);
  }
  const module = { exports: {} as T };
  script.runInThisContext()(module.exports, createRequire(file), module, file, path.dirname(file));
  const fresh = cachedData === undefined || script.cachedDataRejected === true;
  return {
    exports: module.exports,
    saveCache: () => {
      if (!cacheFile || !folder || !fresh) return;
      const partial = `${cacheFile}.${process.pid}-${Math.floor(Math.random() * 2 ** 32).toString(16)}`;
      try {
        // A fresh name, created exclusively and not through a symlink, then renamed over the
        // cache's name (a rename replaces a symlink there, it does not follow it).
        const fd = openSync(
          partial,
          constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
          0o600,
        );
        try {
          const data = script.createCachedData();
          for (let at = 0; at < data.length; ) at += writeSync(fd, data, at);
        } finally {
          closeSync(fd);
        }
        renameSync(partial, cacheFile);
        debugNote(`wrote ${cacheFile}`);
        // The caches of earlier builds of the script are of no more use.
        for (const name of readdirSync(folder)) {
          if (name.startsWith(prefix) && name.endsWith(".cache") && name !== path.basename(cacheFile)) {
            rmSync(path.join(folder, name), { force: true });
          }
        }
      } catch (error) {
        // A cache that cannot be written leaves the next start as this one was.
        rmSync(partial, { force: true });
        debugNote(`not written: ${cacheFile}: ${(error as Error).message}`);
      }
    },
  };
}
