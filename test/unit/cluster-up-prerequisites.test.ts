// `npm run cluster:up` on a machine that lacks tini: it stops before starting anything and says
// which command installs it, instead of starting a cluster whose every Playbook ends RunnerLost.
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";

const SCRIPT = path.join(import.meta.dirname, "../../dist/scripts/cluster-up.js");

/** A PATH with only these commands of this machine (and never tini). */
function pathWith(dir: string, commands: string[]): string {
  const bin = path.join(dir, "bin");
  spawnSync("mkdir", ["-p", bin]);
  for (const command of commands) {
    const found = spawnSync("sh", ["-c", 'command -v "$1"', "sh", command], {
      encoding: "utf8",
    }).stdout.trim();
    if (found) symlinkSync(found, path.join(bin, command));
  }
  return bin;
}

let dir: string | undefined;
afterEach(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe("cluster:up without tini", () => {
  it.each([
    {
      name: "PLAYBOOK_NO_INSTALL=1",
      args: [],
      env: { PLAYBOOK_NO_INSTALL: "1" },
      declined: "PLAYBOOK_NO_INSTALL=1",
    },
    {
      name: "CLUSTER_NO_INSTALL=1 (deprecated)",
      args: [],
      env: { CLUSTER_NO_INSTALL: "1" },
      declined: "CLUSTER_NO_INSTALL=1",
      deprecation: true,
    },
    { name: "--no-install", args: ["--no-install"], env: {}, declined: "installing" },
  ])(
    "stops before starting anything and names the command that installs it ($name)",
    ({ args, env, declined, deprecation }) => {
      dir = mkdtempSync(path.join(tmpdir(), "playbook-prereq-"));
      const stateDir = path.join(dir, "cluster");
      const result = spawnSync(process.execPath, [SCRIPT, ...args], {
        encoding: "utf8",
        env: {
          // apt-get is there, so only the knob keeps it from installing.
          PATH: pathWith(dir, ["sh", "apt-get", "unshare", "ip"]),
          HOME: process.env.HOME,
          CLUSTER_STATE_DIR: stateDir,
          ...env,
        },
        timeout: 60_000,
      });
      expect(result.status, result.stderr).toBe(1);
      expect(result.stdout).toBe("");
      const lines = result.stderr.split("\n").filter(Boolean);
      if (deprecation) {
        expect(lines.shift()).toBe(
          "cluster:up: CLUSTER_NO_INSTALL is deprecated: use PLAYBOOK_NO_INSTALL, which every path reads",
        );
      }
      expect(lines).toEqual([
        expect.stringMatching(
          /^cluster:up: tini is not on PATH \(.*RunnerLost.*\): install it with `(sudo )?apt-get install tini` /,
        ),
      ]);
      expect(lines[0]).toMatch(new RegExp(`\\(not installed: ${declined} declined\\)$`));
      expect(result.stderr).not.toContain("Installing");
      // Nothing was started: no state, no logs, no binaries built.
      expect(existsSync(stateDir) ? readdirSync(stateDir) : []).toEqual([]);
    },
  );
});
