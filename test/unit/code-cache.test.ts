// The code cache of the commands' script (src/cli/code-cache.ts) on a machine shared with other
// users: an upgrade runs the new code even at the same length and time, the cache is read and
// written only in this user's own folder and never through a symlink, and nothing another user
// creates turns it off.
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  chmodSync,
  chownSync,
  cpSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { CLI } from "../support/cli.js";

/** The unprivileged user `nobody`: another user of the machine. */
const NOBODY = 65534;
const isRoot = process.getuid?.() === 0;

let dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  dirs = [];
});

function scratch(): string {
  // Private (mkdtemp makes it 0700): every folder above the cache must be this user's or root's.
  const dir = mkdtempSync(path.join(tmpdir(), "code-cache-"));
  dirs.push(dir);
  return dir;
}

function manifestIn(dir: string): string {
  const file = path.join(dir, "one.yaml");
  writeFileSync(
    file,
    "apiVersion: playbook.dev/v1alpha1\nkind: Playbook\nmetadata: {name: one}\nspec:\n  tasks: [{name: hello, run: 'echo hello'}]\n",
  );
  return file;
}

/** `playbook validate` of the bundle at `cli` with `home` as HOME, telling what its cache did. */
function validate(cli: string, home: string, env: NodeJS.ProcessEnv = {}) {
  const run = spawnSync(process.execPath, [cli, "validate", "-f", manifestIn(home)], {
    env: { PATH: process.env.PATH, HOME: home, TMPDIR: home, NODE_DEBUG: "playbook", ...env },
    encoding: "utf8",
    timeout: 60_000,
  });
  const notes = run.stderr.split("\n").filter((line) => line.includes("code cache:"));
  return { ...run, notes };
}

const folderIn = (home: string) => path.join(home, ".cache", "playbook-controller", "code-cache");

/** A copy of the built bundle (no source maps), as npm or an image would install it. */
function install(into: string): string {
  const dir = path.join(into, "bin");
  cpSync(path.dirname(CLI), dir, { recursive: true, filter: (file) => !file.endsWith(".map") });
  return path.join(dir, "playbook.js");
}

describe("the commands' code cache", () => {
  it("runs the new code after an upgrade that keeps the script's length and time", () => {
    const home = scratch();
    const cli = install(home);
    const script = path.join(path.dirname(cli), "commands.js");
    const first = validate(cli, home);
    expect(first.status, first.stderr).toBe(0);
    expect(first.stdout).toContain("Playbook one is valid");
    // The second start runs from the cache (checked below, after what a user sees).
    const again = validate(cli, home);

    // The next version: the same length, another message, installed with the same time (npm gives
    // every file it installs one time). Its last line is what the build writes: the new content's
    // hash (a build without it leaves the file as it is).
    const old = readFileSync(script, "latin1");
    const { mtimeMs } = statSync(script);
    const stamp = path.join(home, "stamp");
    writeFileSync(stamp, "");
    expect(spawnSync("touch", ["-r", script, stamp]).status).toBe(0);
    const body = old.replace(/\n\/\/ code-cache-key: sha256-[0-9a-f]{64}\n$/, "");
    const patched = body.replace("} is valid`", "} IS VALID`");
    expect(patched).not.toBe(body);
    const next =
      body === old
        ? patched
        : `${patched}\n// code-cache-key: sha256-${createHash("sha256").update(patched, "latin1").digest("hex")}\n`;
    expect(next.length).toBe(old.length);
    writeFileSync(script, next, "latin1");
    expect(spawnSync("touch", ["-r", stamp, script]).status).toBe(0);
    expect(statSync(script).mtimeMs).toBe(mtimeMs);

    const upgraded = validate(cli, home);
    expect(upgraded.status, upgraded.stderr).toBe(0);
    expect(upgraded.stdout).toContain("Playbook one IS VALID");
    expect(again.notes).toEqual([expect.stringContaining("code cache: used ")]);
    // The old version's cache is gone with it.
    expect(readdirSync(folderIn(home)).filter((name) => name.startsWith("commands-validate-"))).toHaveLength(
      1,
    );
  });

  it("does not follow a symlink where its cache file is, and replaces the symlink", () => {
    const home = scratch();
    expect(validate(CLI, home).status).toBe(0);
    const folder = folderIn(home);
    const [name] = readdirSync(folder);
    const file = path.join(folder, name as string);
    // Someone's file at the other end: neither read as code nor written through.
    const elsewhere = path.join(home, "elsewhere.cache");
    cpSync(file, elsewhere);
    const before = readFileSync(elsewhere);
    rmSync(file);
    symlinkSync(elsewhere, file);

    const run = validate(CLI, home);
    expect(run.status, run.stderr).toBe(0);
    expect(run.stdout).toContain("is valid");
    expect(run.notes).toContainEqual(expect.stringMatching(/not used: .*ELOOP/));
    expect(lstatSync(file).isFile()).toBe(true);
    expect(readFileSync(elsewhere).equals(before)).toBe(true);
  });

  it("does not follow a symlink where its cache folder is", () => {
    const home = scratch();
    const folder = folderIn(home);
    const elsewhere = path.join(home, "elsewhere");
    mkdirSync(elsewhere, { mode: 0o700 });
    mkdirSync(path.dirname(folder), { recursive: true, mode: 0o700 });
    symlinkSync(elsewhere, folder);
    const run = validate(CLI, home);
    expect(run.status, run.stderr).toBe(0);
    expect(run.stdout).toContain("is valid");
    expect(readdirSync(elsewhere)).toEqual([]);
    expect(run.notes).toEqual([expect.stringContaining(`not used: ${folder} is not a folder`)]);
  });

  it.runIf(isRoot)("refuses a cache folder, or a folder above it, that another user owns", () => {
    // Root only: to give a folder to another user (chown).
    const home = scratch();
    const folder = folderIn(home);
    mkdirSync(folder, { recursive: true, mode: 0o700 });
    chownSync(folder, NOBODY, NOBODY);
    const run = validate(CLI, home);
    expect(run.status, run.stderr).toBe(0);
    expect(run.stdout).toContain("is valid");
    expect(run.notes).toEqual([expect.stringContaining(`not used: ${folder} is owned by uid ${NOBODY}`)]);
    expect(readdirSync(folder)).toEqual([]);

    // XDG_CACHE_HOME in a folder of another user's, who could swap what is below it.
    const theirs = path.join(home, "theirs");
    mkdirSync(path.join(theirs, "cache"), { recursive: true, mode: 0o755 });
    chownSync(theirs, NOBODY, NOBODY);
    const under = validate(CLI, home, { XDG_CACHE_HOME: path.join(theirs, "cache") });
    expect(under.status, under.stderr).toBe(0);
    expect(under.notes).toEqual([expect.stringContaining(`not used: ${theirs} is owned by uid ${NOBODY}`)]);
    expect(readdirSync(path.join(theirs, "cache"))).toEqual([]);
  });

  it("refuses a cache folder that its group or others may write", () => {
    const home = scratch();
    const folder = folderIn(home);
    mkdirSync(folder, { recursive: true, mode: 0o700 });
    chmodSync(folder, 0o770);
    const run = validate(CLI, home);
    expect(run.status, run.stderr).toBe(0);
    expect(run.notes).toEqual([expect.stringContaining(`not used: ${folder} is writable by its group`)]);
    expect(readdirSync(folder)).toEqual([]);
  });

  it.runIf(isRoot)("cannot be turned off by what another user leaves in the shared temporary folder", () => {
    // Root only: the other user's file is given to them (chown). The temporary folder is shared
    // and sticky, as /tmp; the other user put a file where a shared cache folder would go.
    const home = scratch();
    const shared = path.join(home, "tmp");
    mkdirSync(shared);
    chmodSync(shared, 0o1777);
    for (const name of ["node-compile-cache", "playbook-controller"]) {
      writeFileSync(path.join(shared, name), "");
      chownSync(path.join(shared, name), NOBODY, NOBODY);
    }
    const env = { TMPDIR: shared };
    expect(validate(CLI, home, env).status).toBe(0);
    const second = validate(CLI, home, env);
    expect(second.status, second.stderr).toBe(0);
    expect(second.notes).toEqual([
      expect.stringContaining(`code cache: used ${folderIn(home)}/commands-validate-`),
    ]);
  });
});
