// `npm run image:build` on a machine without podman (or docker): it stops before building
// anything and says which commands install what is missing, as `cluster:up` does for containerd.
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";

const SCRIPT = path.join(import.meta.dirname, "../../dist/scripts/image-build.js");

let dir: string | undefined;
afterEach(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe("image:build without podman", () => {
  it("stops before building and names the apt-get command for each missing tool", () => {
    dir = mkdtempSync(path.join(tmpdir(), "playbook-image-prereq-"));
    const result = spawnSync(process.execPath, [SCRIPT], {
      encoding: "utf8",
      // An empty PATH: no podman, docker, runc or debootstrap; PLAYBOOK_NO_INSTALL keeps apt-get out.
      env: { PATH: dir, HOME: process.env.HOME, PLAYBOOK_NO_INSTALL: "1" },
      timeout: 60_000,
    });
    expect(result.status, result.stderr).toBe(1);
    expect(result.stdout).toBe("");
    expect(result.stderr).toMatch(
      /^image:build: failed: podman is not on PATH \(builds the project's image.*\)$/m,
    );
    expect(result.stderr).toMatch(/^runc is not on PATH \(the OCI runtime .*\)$/m);
    expect(result.stderr).toMatch(/^debootstrap is not on PATH \(makes the stand-in .*\)$/m);
    // One line to run, with every package in it.
    expect(result.stderr).toMatch(
      /^install them with `(sudo )?apt-get install podman runc (containernetworking-plugins )?debootstrap` \(not installed: PLAYBOOK_NO_INSTALL=1 declined\)$/m,
    );
    expect(result.stderr).not.toContain("Installing");
    expect(result.stderr).not.toContain("Building");
  });
});
