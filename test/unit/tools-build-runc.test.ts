// tools/build-runc.sh as its callers meet it (tools/build.sh's real-node set): a runc already in
// its own cache folder is taken as it is, and a machine without libseccomp's headers is told
// which Debian package to install, before anything is compiled.
import { spawnSync } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

const SCRIPT = join(import.meta.dirname, "../../tools/build-runc.sh");
const VERSION = /github\.com\/opencontainers\/runc (v\S+)/.exec(
  readFileSync(join(import.meta.dirname, "../../tools/runc/go.mod"), "utf8"),
)?.[1];

const runScript = (env: NodeJS.ProcessEnv) =>
  spawnSync("bash", [SCRIPT], { env: { ...process.env, ...env }, encoding: "utf8" });

describe("tools/build-runc.sh", () => {
  it("prints the runc of its own cache folder, runc-<version>, without building it again", () => {
    const cache = mkdtempSync(join(tmpdir(), "build-runc-"));
    const binary = join(cache, `runc-${VERSION}`, "runc");
    mkdirSync(join(cache, `runc-${VERSION}`));
    writeFileSync(binary, "#!/bin/sh\n");
    chmodSync(binary, 0o755);
    const result = runScript({ PLAYBOOK_TOOLS_CACHE: cache });
    expect(result.status, result.stderr).toBe(0);
    expect(result.stdout).toBe(`${binary}\n`);
    expect(result.stderr).toBe("");
  });

  it("names libseccomp-dev when its headers are missing, and builds nothing", () => {
    const cache = mkdtempSync(join(tmpdir(), "build-runc-"));
    // A C compiler that finds no <seccomp.h>, as on a machine without the package.
    const bin = mkdtempSync(join(tmpdir(), "build-runc-bin-"));
    writeFileSync(
      join(bin, "cc"),
      "#!/bin/sh\necho 'fatal error: seccomp.h: No such file or directory' >&2\nexit 1\n",
    );
    chmodSync(join(bin, "cc"), 0o755);
    const result = runScript({ PLAYBOOK_TOOLS_CACHE: cache, PATH: `${bin}:${process.env.PATH}` });
    expect(result.status).toBe(1);
    expect(result.stdout).toBe("");
    expect(result.stderr).toContain(
      "tools:runc: error: libseccomp's headers are required to build runc with seccomp: install the Debian package libseccomp-dev",
    );
  });
});
