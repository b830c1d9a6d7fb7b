// The CLI's start-up: the compiled code of what a `playbook` command ran is kept in this user's
// cache folder ($XDG_CACHE_HOME or ~/.cache, playbook-controller/code-cache: the commands' script
// that run, validate and pod-runner run, and Node's compile cache of the modules in node/), so the
// next start (a local run, a pod) does not compile it again. `playbook --version` alone loads no
// chunk and leaves the cache alone.
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";

import { CLI } from "../support/cli.js";

const EXAMPLE = join(import.meta.dirname, "../../examples/hello.yaml");

let dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  dirs = [];
});

function scratch(): string {
  const dir = mkdtempSync(join(tmpdir(), "cli-startup-"));
  dirs.push(dir);
  return dir;
}

/** Runs the CLI with this folder as its home and no NODE_COMPILE_CACHE of the caller's. */
function playbook(args: string[], tmp: string) {
  const env: NodeJS.ProcessEnv = { PATH: process.env.PATH, HOME: tmp, TMPDIR: tmp };
  return spawnSync(process.execPath, [CLI, ...args], { env, encoding: "utf8" });
}

function cachedFiles(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { recursive: true, encoding: "utf8" }).filter((f) =>
    statSync(join(dir, f)).isFile(),
  );
}

describe("playbook start-up", () => {
  it("leaves its modules compiled in this user's cache folder for the next start", () => {
    const tmp = scratch();
    const first = playbook(["validate", "-f", EXAMPLE], tmp);
    expect(first.status, first.stderr).toBe(0);
    expect(first.stdout).toContain("is valid");
    const cache = join(tmp, ".cache", "playbook-controller", "code-cache");
    // The commands' script (commander, zod, yaml and our modules), compiled as validate ran it.
    expect(cachedFiles(cache)).toEqual([expect.stringMatching(/^commands-validate-.*\.cache$/)]);
    // --help runs the program's modules, which Node's own cache keeps: its chunk, the re-export
    // the entry imports it through, and rolldown's helpers.
    expect(playbook(["--help"], tmp).status).toBe(0);
    expect(cachedFiles(join(cache, "node")).length).toBeGreaterThanOrEqual(3);
  });

  it("runs a Playbook the same with the cache filled", () => {
    const tmp = scratch();
    const file = join(tmp, "one.yaml");
    writeFileSync(
      file,
      "apiVersion: playbook.dev/v1alpha1\nkind: Playbook\nmetadata: {name: one}\nspec:\n  tasks: [{name: hello, run: 'echo hello'}]\n",
    );
    for (const round of ["cold", "warm"]) {
      const run = playbook(["run", "-f", file], tmp);
      expect(run.status, `${round}: ${run.stderr}`).toBe(0);
      expect(run.stdout).toContain("hello");
    }
  });

  it("still starts when the home and temporary folders do not exist, even under /proc", () => {
    // Nothing, not even root, can create a folder there; a recursive mkdir would wait on it forever.
    const run = spawnSync(process.execPath, [CLI, "validate", "-f", EXAMPLE], {
      env: { PATH: process.env.PATH, HOME: "/proc/no-such-home", TMPDIR: "/proc/no-such-tmp" },
      encoding: "utf8",
      timeout: 30_000,
    });
    expect(run.error).toBeUndefined();
    expect(run.status, run.stderr).toBe(0);
  });

  it("still starts when the compile cache cannot be written", () => {
    const tmp = scratch();
    // A file where the cache folder would go: it cannot be created and the start goes on without.
    mkdirSync(join(tmp, ".cache"));
    writeFileSync(join(tmp, ".cache", "playbook-controller"), "");
    const run = playbook(["validate", "-f", EXAMPLE], tmp);
    expect(run.status, run.stderr).toBe(0);
    expect(run.stderr).toBe("");
  });
});
