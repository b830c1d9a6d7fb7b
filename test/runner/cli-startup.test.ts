// The CLI's start-up: the compiled code of what a `playbook` command ran is kept in the compile
// cache folder (Node's for the modules; one of the playbook command's own, playbook-<uid>, for
// the commands' script that run, validate and pod-runner run), so the next start (a local run, a
// pod) does not compile it again. `playbook --version` alone loads no chunk and leaves the cache alone.
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
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

/** Runs the CLI with this temporary folder and no NODE_COMPILE_CACHE of the caller's. */
function playbook(args: string[], tmp: string) {
  const env: NodeJS.ProcessEnv = { PATH: process.env.PATH, HOME: process.env.HOME, TMPDIR: tmp };
  return spawnSync(process.execPath, [CLI, ...args], { env, encoding: "utf8" });
}

function cachedFiles(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { recursive: true, encoding: "utf8" }).filter((f) =>
    statSync(join(dir, f)).isFile(),
  );
}

describe("playbook start-up", () => {
  it("leaves its modules compiled in the temporary folder's compile cache for the next start", () => {
    const tmp = scratch();
    const first = playbook(["validate", "-f", EXAMPLE], tmp);
    expect(first.status, first.stderr).toBe(0);
    expect(first.stdout).toContain("is valid");
    const cache = join(tmp, "node-compile-cache");
    // The commands' script (commander, zod, yaml and our modules), compiled as validate ran it.
    expect(cachedFiles(join(cache, `playbook-${process.getuid?.()}`))).toEqual([
      expect.stringMatching(/^commands-validate-.*\.cache$/),
    ]);
    // --help runs the program's modules, which Node's own cache keeps: its chunk, the re-export
    // the entry imports it through, and rolldown's helpers.
    expect(playbook(["--help"], tmp).status).toBe(0);
    expect(cachedFiles(cache).filter((file) => !file.startsWith("playbook-")).length).toBeGreaterThanOrEqual(
      3,
    );
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

  it("still starts when the temporary folder does not exist, even under /proc", () => {
    // Nothing, not even root, can create a folder there; Node's cache would wait on it forever.
    const run = spawnSync(process.execPath, [CLI, "validate", "-f", EXAMPLE], {
      env: { PATH: process.env.PATH, TMPDIR: "/proc/no-such-tmp" },
      encoding: "utf8",
      timeout: 30_000,
    });
    expect(run.error).toBeUndefined();
    expect(run.status, run.stderr).toBe(0);
  });

  it("still starts when the compile cache cannot be written", () => {
    const tmp = scratch();
    // A file where the cache folder would go: Node cannot create it and goes on without.
    writeFileSync(join(tmp, "node-compile-cache"), "");
    const run = playbook(["validate", "-f", EXAMPLE], tmp);
    expect(run.status, run.stderr).toBe(0);
    expect(run.stderr).toBe("");
  });
});
